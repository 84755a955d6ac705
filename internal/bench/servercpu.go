package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// clockTick is the unit of /proc/PID/stat's CPU times: USER_HZ, 100 on
// every Linux architecture Go runs on.
const clockTick = 10 * time.Millisecond

// localServer reports whether pool's server runs on this machine, where
// its processes' CPU can be read from /proc.
func localServer(pool *pgxpool.Pool) bool {
	host := pool.Config().ConnConfig.Host
	return host == "localhost" || host == "127.0.0.1" || host == "::1" || strings.HasPrefix(host, "/")
}

// serverCPU is the CPU time used so far, user and system, by the
// processes of this machine named postgres, keyed by pid (a process that
// starts later started from zero). ok is false when none can be read.
func serverCPU() (map[int]time.Duration, bool) {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	out := map[int]time.Duration{}
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // gone since the glob
		}
		pid, cpu, ok := postgresCPU(b)
		if ok {
			out[pid] = cpu
		}
	}
	return out, len(out) > 0
}

// postgresCPU parses one /proc/PID/stat: the pid and utime + stime of a
// process whose command is postgres. The command is in parentheses and
// may hold spaces and parentheses itself, so fields count from the last
// ')'.
func postgresCPU(stat []byte) (pid int, cpu time.Duration, ok bool) {
	open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || end < open || string(stat[open+1:end]) != "postgres" {
		return 0, 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(stat[:open])))
	if err != nil {
		return 0, 0, false
	}
	// After ")": state(3) ppid(4) ... utime(14) stime(15).
	f := strings.Fields(string(stat[end+1:]))
	if len(f) < 13 {
		return 0, 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return pid, time.Duration(utime+stime) * clockTick, true
}

// serverCPUSince is the CPU the server's processes used since from.
func serverCPUSince(from map[int]time.Duration) (time.Duration, bool) {
	now, ok := serverCPU()
	if !ok {
		return 0, false
	}
	var d time.Duration
	for pid, cpu := range now {
		d += cpu - min(from[pid], cpu) // a pid reused since counts from zero
	}
	return d, true
}
