package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// StatusKB returns a "<field>: <n> kB" value of /proc/<pid>/status (VmRSS,
// VmHWM, …) in KiB.
func StatusKB(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("bench: reading status of %d: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			break
		}
		return strconv.ParseInt(fields[0], 10, 64)
	}
	return 0, fmt.Errorf("bench: no %s in /proc/%d/status", field, pid)
}

// CPUTicks returns utime+stime of pid in clock ticks (USER_HZ, 100 on
// Linux), so that a difference over a window gives the process's CPU use.
func CPUTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("bench: reading stat of %d: %w", pid, err)
	}
	// The command name may hold spaces; fields after it start past ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("bench: malformed /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	// After ')': state(0) … utime is field 14 of the line, index 11 here.
	if len(fields) < 13 {
		return 0, fmt.Errorf("bench: short /proc/%d/stat", pid)
	}
	ut, err := strconv.ParseInt(fields[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bench: utime: %w", err)
	}
	st, err := strconv.ParseInt(fields[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bench: stime: %w", err)
	}
	return ut + st, nil
}

// PIDWithArg finds the process whose command line has an argument
// containing needle (the gateway's Caddyfile path is unique per gateway,
// and tests/gateway does not expose the process id).
func PIDWithArg(needle string) (int, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, fmt.Errorf("bench: listing /proc: %w", err)
	}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		for _, arg := range bytes.Split(b, []byte{0}) {
			if bytes.Contains(arg, []byte(needle)) {
				return strconv.Atoi(filepath.Base(d))
			}
		}
	}
	return 0, fmt.Errorf("bench: no process with an argument containing %q", needle)
}
