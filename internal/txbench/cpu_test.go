package txbench

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is the unit of utime and stime in /proc/PID/stat (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// cpuTime is the CPU time used so far by the database server and by this process.
type cpuTime struct {
	// server is the sum over every process whose name is one of the backend's server names:
	// the whole server, so another client's work on a shared server counts too. found is
	// false when no such process runs here (a remote server, or SQLite in this process).
	server time.Duration
	found  bool
	// self is this process's: the HTTP server and clients, the driver, and idem.
	self time.Duration
}

// readCPU reads the CPU time of the server processes named one of names and of this process.
func readCPU(names []string) cpuTime {
	var c cpuTime
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if len(names) == 0 {
		return c
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		comm, err := os.ReadFile(d + "/comm")
		if err != nil || !slices.Contains(names, strings.TrimSpace(string(comm))) {
			continue
		}
		if t, ok := procTicks(d + "/stat"); ok {
			c.server += time.Duration(t) * clockTick
			c.found = true
		}
	}
	return c
}

// procTicks returns utime + stime from a /proc/PID/stat file. The fields are counted after
// the command's closing parenthesis, since the command may hold spaces.
func procTicks(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	k, err2 := strconv.ParseInt(f[12], 10, 64)
	return u + k, err1 == nil && err2 == nil
}

// perRequest is CPU time per request over a run: after - before, divided by n.
type perRequest struct {
	server, self time.Duration
	found        bool
}

func cpuPerRequest(before, after cpuTime, n int64) perRequest {
	if n <= 0 {
		return perRequest{}
	}
	return perRequest{
		server: (after.server - before.server) / time.Duration(n),
		self:   (after.self - before.self) / time.Duration(n),
		found:  before.found && after.found,
	}
}
