package router

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/comfygate/comfygate/storage/pgtest"
)

// The router benchmark shares two vCPUs between the load generator, the
// peer, the gateway, Redis and Postgres, so a request rate is really a CPU
// cost per request. cpuGroups splits that cost by process so that a result
// says where the time went, not only how much there was.

// clockTick is USER_HZ, the unit of utime/stime in /proc (100 on Linux).
const clockTick = 100

// cpuGroup is a named set of processes whose CPU time is summed.
type cpuGroup struct {
	name  string
	match func(pid int, comm string) bool
}

// benchGroups: the gateway (its working directory is gwDir), this test
// process (the load generator), the peer's process, redis-server and every
// postgres process.
func benchGroups(gwDir string, peerPID int) []cpuGroup {
	self := os.Getpid()
	return []cpuGroup{
		{"gateway", func(pid int, _ string) bool {
			d, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "cwd"))
			return err == nil && d == gwDir
		}},
		{"load", func(pid int, _ string) bool { return pid == self }},
		{"peer", func(pid int, _ string) bool { return pid == peerPID }},
		{"redis", func(_ int, comm string) bool { return comm == "redis-server" }},
		{"postgres", func(_ int, comm string) bool { return comm == "postgres" }},
	}
}

// cpuSample is the CPU seconds used so far per group, plus the whole
// machine's busy seconds (all CPUs, from /proc/stat).
type cpuSample struct {
	group   []float64
	machine float64
}

func sampleCPU(groups []cpuGroup) cpuSample {
	s := cpuSample{group: make([]float64, len(groups)), machine: machineBusy()}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, utime, stime, ok := procStat(pid)
		if !ok {
			continue
		}
		for i, g := range groups {
			if g.match(pid, comm) {
				s.group[i] += float64(utime+stime) / clockTick
				break
			}
		}
	}
	return s
}

// procStat reads comm, utime and stime (ticks) of pid.
func procStat(pid int) (string, int64, int64, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", 0, 0, false
	}
	s := string(b)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return "", 0, 0, false
	}
	f := strings.Fields(s[closing+1:])
	if len(f) < 13 { // fields 3.. ; utime is field 14, stime 15
		return "", 0, 0, false
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return s[open+1 : closing], u, st, true
}

// machineBusy is the non-idle CPU seconds of all CPUs since boot.
func machineBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var busy int64
	for _, i := range []int{1, 2, 3, 6, 7} { // user nice system irq softirq
		if i < len(f) {
			n, _ := strconv.ParseInt(f[i], 10, 64)
			busy += n
		}
	}
	return float64(busy) / clockTick
}

// perRequest is the CPU microseconds per request each group (and the
// machine) spent between a and b.
func perRequest(a, b cpuSample, requests float64) (groups []float64, machine float64) {
	groups = make([]float64, len(a.group))
	for i := range a.group {
		groups[i] = (b.group[i] - a.group[i]) * 1e6 / requests
	}
	return groups, (b.machine - a.machine) * 1e6 / requests
}

// scriptStats is the Redis server's EVALSHA count and time (µs) so far.
type scriptStats struct{ calls, usec float64 }

func redisScriptStats(t *testing.T) scriptStats {
	t.Helper()
	opts, err := redis.ParseURL(pgtest.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	defer c.Close()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var st scriptStats
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				st.calls = n
			case "usec":
				st.usec = n
			}
		}
	}
	return st
}
