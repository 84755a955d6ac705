package cli

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	flag "github.com/spf13/pflag"

	"github.com/outboxd/outbox/internal/spelling"
)

// The command tree is cobra's: it dispatches, suggests a command for a
// mistyped one and writes the shell completion scripts. Each command still
// parses its own flags (pflag, GNU syntax) so that the configuration layers
// apply to them; cobra learns them for completion through env.collect.

// errCollected ends a command run in collect mode, right after its flags
// are defined.
var errCollected = errors.New("flags collected")

// subcommands are the words that follow a command, for completion.
var subcommands = map[string][]string{
	"dead":       {"list", "show", "top", "retry", "skip"},
	"config":     {"check"},
	"completion": {"bash", "zsh", "fish"},
}

func findCommand(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return &c
		}
	}
	return nil
}

// isCommand reports whether name is a command of root, cobra's hidden
// completion commands included.
func isCommand(root *cobra.Command, name string) bool {
	if name == cobra.ShellCompRequestCmd || name == cobra.ShellCompNoDescRequestCmd {
		return true
	}
	for _, c := range root.Commands() {
		if c.Name() == name {
			return true
		}
	}
	return false
}

func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:                        "outboxd",
		Short:                      "relay a PostgreSQL transactional outbox to a sink",
		Version:                    versionString(),
		SilenceErrors:              true,
		SilenceUsage:               true,
		CompletionOptions:          cobra.CompletionOptions{DisableDefaultCmd: true},
		SuggestionsMinimumDistance: 2,
	}
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetVersionTemplate("outboxd {{.Version}}\n")
	root.SetHelpFunc(func(*cobra.Command, []string) { printUsage(e.stdout) })
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return usagef("%v (run `outboxd help`)", err)
	})
	for _, c := range commands() {
		run := c.run
		root.AddCommand(&cobra.Command{
			Use:                c.name,
			Short:              c.summary,
			DisableFlagParsing: true,
			RunE: func(cmd *cobra.Command, args []string) error {
				ctx, stop := shutdownContext(cmd.Context(), e.stderr)
				defer stop()
				err := run(ctx, e, args)
				if errors.Is(err, flag.ErrHelp) {
					return nil // the command printed its help; cobra would print the root's too
				}
				return err
			},
			ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
				return completeArgs(cmd, e, run, args, toComplete)
			},
		})
	}
	root.AddCommand(&cobra.Command{
		Use:       "completion bash|zsh|fish",
		Short:     "print a shell completion script",
		ValidArgs: subcommands["completion"],
		RunE: func(_ *cobra.Command, args []string) error {
			return runCompletion(root, e, args)
		},
	})
	return root
}

// completeArgs offers a command's flags when the word starts with "-", and
// its subcommands as the first word.
func completeArgs(cmd *cobra.Command, e *env, run func(context.Context, *env, []string) error, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if n := len(args); n > 0 && !strings.HasPrefix(toComplete, "-") {
		if values, ok := flagValues(args[n-1]); ok {
			return values, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
		}
	}
	if !strings.HasPrefix(toComplete, "-") {
		if subs := subcommands[cmd.Name()]; len(args) == 0 && subs != nil {
			return subs, cobra.ShellCompDirectiveNoFileComp
		}
		return nil, cobra.ShellCompDirectiveDefault
	}
	var fs *flag.FlagSet
	ce := *e
	ce.collect = func(f *flag.FlagSet) { fs = f }
	_ = run(cmd.Context(), &ce, args) //nolint:errcheck // errCollected, or a usage error before any flag
	if fs == nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	fs.VisitAll(func(f *flag.Flag) {
		if name := "--" + f.Name; strings.HasPrefix(name, toComplete) {
			out = append(out, cobra.CompletionWithDesc(name, firstLine(f.Usage)))
		}
	})
	return out, cobra.ShellCompDirectiveNoFileComp
}

// flagValues returns the values to offer after a flag whose values are a
// known list: the sink URL schemes, the log formats and levels.
func flagValues(flagArg string) ([]cobra.Completion, bool) {
	switch strings.TrimLeft(flagArg, "-") {
	case "sink":
		var out []cobra.Completion
		for _, s := range sinkSchemes() {
			switch s {
			case "stdout", "null":
				out = append(out, s+":")
			default:
				out = append(out, s+"://")
			}
		}
		return out, true
	case "log-format":
		return []cobra.Completion{"text", "json"}, true
	case "log-level":
		return []cobra.Completion{"debug", "info", "warn", "error"}, true
	}
	return nil, false
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func runCompletion(root *cobra.Command, e *env, args []string) error {
	if len(args) != 1 {
		return usagef("completion: want one shell: bash, zsh or fish")
	}
	switch args[0] {
	case "bash":
		return root.GenBashCompletionV2(e.stdout, true)
	case "zsh":
		return root.GenZshCompletion(e.stdout)
	case "fish":
		return root.GenFishCompletion(e.stdout, true)
	default:
		return usagef("completion: unknown shell %q%s (want bash, zsh or fish)", args[0], didYouMean(suggest(args[0], subcommands["completion"]), ""))
	}
}

// versionString is the version this binary was built as (versionOf of
// Version and the binary's build information).
func versionString() string {
	info, _ := debug.ReadBuildInfo()
	return versionOf(Version, info)
}

// pseudoVersion matches the tail of a Go pseudo-version (a timestamp and a
// commit), which the go command stamps on a build of an untagged checkout.
var pseudoVersion = regexp.MustCompile(`[0-9]{14}-[0-9a-f]{12}(\+dirty)?$`)

// versionOf renders a version: the one the build set (-X ...cli.Version), else
// the module's release version, else "devel"; then the commit Go stamped into
// the build information, "+dirty" when the tree had uncommitted changes. A
// pseudo-version is not shown: it only repeats the commit. Without a stamp
// (go run, -buildvcs=false) it says so rather than print nothing.
func versionOf(set string, info *debug.BuildInfo) string {
	v := set
	if v == "dev" || v == "" {
		v = "devel"
		if info != nil && info.Main.Version != "" && info.Main.Version != "(devel)" && !pseudoVersion.MatchString(info.Main.Version) {
			v = info.Main.Version
		}
	}
	var rev, at string
	var modified bool
	if info != nil {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	switch {
	case rev == "" && v == "devel":
		return v + " (commit unknown: built without VCS information, as by go run or -buildvcs=false; make build stamps it)"
	case rev == "":
		return v
	}
	if modified {
		rev += "+dirty"
	}
	if at != "" {
		return v + " (commit " + rev + ", " + at + ")"
	}
	return v + " (commit " + rev + ")"
}

// didYouMean renders suggestions as " (did you mean X?)", each with prefix.
func didYouMean(suggestions []string, prefix string) string {
	if len(suggestions) == 0 {
		return ""
	}
	for i, s := range suggestions {
		suggestions[i] = prefix + s
	}
	return fmt.Sprintf(" (did you mean %s?)", strings.Join(suggestions, " or "))
}

// suggest returns the names close to typed: at most two edits away, or
// starting with it, as cobra suggests commands.
func suggest(typed string, names []string) []string {
	var out []string
	for _, n := range names {
		if spelling.Distance(strings.ToLower(typed), strings.ToLower(n)) <= 2 || (len(typed) > 1 && strings.HasPrefix(n, typed)) {
			out = append(out, n)
		}
	}
	return out
}
