package harness

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// fdLimit is what the harness could do about the limit on open files before it starts the
// processes of the memory test, which inherit it.
type fdLimit struct {
	soft, hard uint64 // after raising
	wanted     uint64 // what the largest burst needs in one proxy (0: no raise was needed)
	err        error  // why the hard limit could not reach wanted
}

// fdsPerRequest is what one in-flight request holds in a proxy: the upstream's connection
// (HTTP/1.1: one request at a time per connection). The clients of the memory test speak h2c,
// up to streamsPerConn requests at once on one connection.
const fdsPerRequest = 1

// streamsPerConn is how many requests Go's HTTP/2 server takes at once on one connection (its
// default MaxConcurrentStreams); the client opens another connection beyond it.
const streamsPerConn = 250

// fdsFor is what n in-flight requests hold in a proxy besides its idle descriptors.
func fdsFor(n int) int { return fdsPerRequest*n + (n+streamsPerConn-1)/streamsPerConn }

// fdSlack covers what a proxy holds besides its requests' sockets: stdio, the log file, the
// epoll and wake-up descriptors, the listener, and a margin.
const fdSlack = 32

// raiseNofile raises this process's limit on open files (RLIMIT_NOFILE) so a proxy can hold
// fdsPerRequest sockets for each of n requests: the soft limit to the hard one, and the hard
// one itself when the process may (root with CAP_SYS_RESOURCE).
func raiseNofile(n int) fdLimit {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return fdLimit{err: err}
	}
	want := uint64(fdsFor(n) + fdSlack)
	res := fdLimit{wanted: want}
	if want > l.Max {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: want}); err != nil {
			res.err = err
		}
	}
	if res.err != nil || want <= l.Max {
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l)
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l)
	res.soft, res.hard = l.Cur, l.Max
	return res
}

// fits returns the largest number of requests, at most n, a proxy holding idle descriptors
// can have in flight under the soft limit.
func (l fdLimit) fits(n, idle int) int {
	if l.soft == 0 {
		return n
	}
	room := int(l.soft) - idle - fdSlack
	for n > 1 && fdsFor(n) > room {
		n--
	}
	return n
}

// String explains the limit for the report.
func (l fdLimit) String() string {
	s := fmt.Sprintf("the limit on open files is %d (soft) and %d (hard)", l.soft, l.hard)
	if l.err != nil {
		s += fmt.Sprintf("; raising it to %d failed (%v%s)", l.wanted, l.err, capNote())
	}
	return s
}

// capNote says whether the process has CAP_SYS_RESOURCE, the capability that lets it raise
// a hard limit.
func capNote() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			bnd, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return ""
			}
			const capSysResource = 24
			if bnd&(1<<capSysResource) == 0 {
				return ": CAP_SYS_RESOURCE is not in this container's capability bounding set, so not even root may raise a hard limit"
			}
			return ""
		}
	}
	return ""
}

// openFDs counts the descriptors process pid has open.
func openFDs(pid int) (int, error) {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	return len(ents), err
}
