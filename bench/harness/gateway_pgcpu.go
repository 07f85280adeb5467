package harness

import (
	"bytes"
	"os"
	"strconv"
	"time"

	"github.com/idemkit/idem/bench/procstat"
)

// postgresCPU returns the CPU time the local PostgreSQL server has used so far: every
// process named postgres (the postmaster, its workers, the backends alive now), plus what the
// postmaster's exited backends used (its children's time, counted once reaped). It reports
// false when no PostgreSQL process is visible (a server on another host or in a container).
func postgresCPU() (time.Duration, bool) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
	}
	var total time.Duration
	found := false
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err != nil || !bytes.HasPrefix(comm, []byte("postgres")) {
			continue
		}
		own, err := procstat.CPU(pid)
		if err != nil {
			continue // exited meanwhile
		}
		found = true
		total += own + reapedCPU(pid)
	}
	return total, found
}

// reapedCPU returns the CPU time of pid's exited and reaped children (cutime + cstime).
func reapedCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 15 {
		return 0
	}
	cu, err1 := strconv.ParseInt(string(f[13]), 10, 64)
	cs, err2 := strconv.ParseInt(string(f[14]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(cu+cs) * 10 * time.Millisecond // clock ticks of 10 ms, as procstat
}

// pgCPU is the CPU time spent per new key (or per pgbench transaction pair) in each part of
// a PostgreSQL case, summed over its rounds.
type pgCPU struct {
	server, client time.Duration // PostgreSQL; pgbench or the load generator
	gateway, up    time.Duration // the gateway and the upstream (zero for pgbench)
	ops            float64       // operations the times cover, warm-ups included
}

func (c *pgCPU) per(d time.Duration) string {
	if c.ops == 0 {
		return "?"
	}
	return strconv.FormatFloat(float64(d.Microseconds())/c.ops, 'f', 0, 64) + " µs"
}

// total returns the CPU time per operation of every part together.
func (c *pgCPU) total() time.Duration { return c.server + c.client + c.gateway + c.up }
