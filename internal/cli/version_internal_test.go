package cli

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVersionOf(t *testing.T) {
	t.Parallel()
	const rev = "70b20c8aaf40f329358b4246780c44e539481a39"
	stamped := func(version string, modified bool) *debug.BuildInfo {
		m := "false"
		if modified {
			m = "true"
		}
		return &debug.BuildInfo{Main: debug.Module{Version: version}, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev},
			{Key: "vcs.time", Value: "2026-12-04T20:29:32Z"}, {Key: "vcs.modified", Value: m},
		}}
	}
	for _, tc := range []struct {
		name string
		set  string
		info *debug.BuildInfo
		want string
	}{
		{"CheckoutBuild", "dev", stamped("v0.0.0-20261204202932-70b20c8aaf40", false),
			"devel (commit " + rev + ", 2026-12-04T20:29:32Z)"},
		{"DirtyCheckoutBuild", "dev", stamped("v0.0.0-20261204202932-70b20c8aaf40+dirty", true),
			"devel (commit " + rev + "+dirty, 2026-12-04T20:29:32Z)"},
		{"OlderGoStampsDevel", "dev", stamped("(devel)", true),
			"devel (commit " + rev + "+dirty, 2026-12-04T20:29:32Z)"},
		{"TaggedModule", "dev", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v1.4.0"},
		{"PseudoVersionAfterTag", "dev", stamped("v1.4.1-0.20261204202932-70b20c8aaf40", false),
			"devel (commit " + rev + ", 2026-12-04T20:29:32Z)"},
		{"SetByLinker", "v1.5.0-rc1", stamped("(devel)", false), "v1.5.0-rc1 (commit " + rev + ", 2026-12-04T20:29:32Z)"},
		{"NoStamp", "dev", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			"devel (commit unknown: built without VCS information, as by go run or -buildvcs=false; make build stamps it)"},
		{"NoBuildInfo", "dev", nil,
			"devel (commit unknown: built without VCS information, as by go run or -buildvcs=false; make build stamps it)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, versionOf(tc.set, tc.info))
		})
	}
}
