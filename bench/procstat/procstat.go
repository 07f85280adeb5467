package procstat

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// ErrFormat reports a /proc file that could not be parsed.
var ErrFormat = errors.New("procstat: unexpected /proc format")

// clockTick is the unit of utime and stime in /proc/PID/stat: USER_HZ, 100 on every Linux
// architecture Go supports.
const clockTick = 10 * time.Millisecond

// CPU returns the CPU time (user + system) process pid has used so far, all threads
// included, with a resolution of 10ms. pid 0 means this process.
func CPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(path(pid, "stat"))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces: fields count from
	// the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("%w: no ')' in stat", ErrFormat)
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("%w: %d fields in stat", ErrFormat, len(f)+2)
	}
	u, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	s, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%w: utime %q stime %q", ErrFormat, f[11], f[12])
	}
	return time.Duration(u+s) * clockTick, nil
}

// Memory is a process's resident memory, in bytes.
type Memory struct {
	// RSS is the resident set size now (VmRSS).
	RSS int64
	// PeakRSS is the largest RSS the process has had since it started (VmHWM).
	PeakRSS int64
}

// Mem returns the current and peak resident memory of process pid. pid 0 means this process.
func Mem(pid int) (Memory, error) {
	b, err := os.ReadFile(path(pid, "status"))
	if err != nil {
		return Memory{}, err
	}
	var m Memory
	var found int
	for line := range bytes.Lines(b) {
		var dst *int64
		switch {
		case bytes.HasPrefix(line, []byte("VmRSS:")):
			dst = &m.RSS
		case bytes.HasPrefix(line, []byte("VmHWM:")):
			dst = &m.PeakRSS
		default:
			continue
		}
		f := bytes.Fields(line)
		if len(f) != 3 || string(f[2]) != "kB" {
			return Memory{}, fmt.Errorf("%w: %q", ErrFormat, bytes.TrimSpace(line))
		}
		kb, err := strconv.ParseInt(string(f[1]), 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("%w: %q", ErrFormat, bytes.TrimSpace(line))
		}
		*dst = kb << 10
		found++
	}
	if found != 2 {
		return Memory{}, fmt.Errorf("%w: VmRSS or VmHWM missing from status", ErrFormat)
	}
	return m, nil
}

func path(pid int, file string) string {
	if pid == 0 {
		return "/proc/self/" + file
	}
	return "/proc/" + strconv.Itoa(pid) + "/" + file
}
