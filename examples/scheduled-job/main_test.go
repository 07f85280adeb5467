package main

import (
	"os"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idem/examples/internal/runmain"
)

// TestMain lets the test binary stand for the example's child scheduler process: the demo
// starts its own executable with -fire, which here is the test binary.
func TestMain(m *testing.M) {
	if slices.Contains(os.Args[1:], "-fire") {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The demo as `go run ./examples/scheduled-job` runs it: of two schedulers firing at once one
// runs the report; a scheduler process killed halfway is taken over after its lease, and the
// restarted one finds the period done. Each report is written once, by the one that ran it.
func TestEachPeriodRunOnce(t *testing.T) {
	out := runmain.Run(t, 2*time.Minute, main)
	re := regexp.MustCompile(`^two schedulers fire for 2026-11-30 at once:
  scheduler-(A|B): reports\|daily-report/2026-11-30: (.+)
  scheduler-(A|B): reports\|daily-report/2026-11-30: (.+)
scheduler-A \(a process\) starts 2026-12-01 and is killed halfway:
  killed
  scheduler-B: reports\|daily-report/2026-12-01: took over from a dead holder and ran it
scheduler-A restarts and fires again:
  scheduler-A: reports\|daily-report/2026-12-01: already done by scheduler-B
daily-report-2026-11-30.txt: report for 2026-11-30 by scheduler-(A|B)
daily-report-2026-12-01.txt: report for 2026-12-01 by scheduler-B
$`)
	m := re.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("output:\n%s\ndoes not match\n%s", out, re)
	}
	// 2026-11-30: one of the two ran it, the other found it done by that one, whose report it is.
	first, second := []string{m[1], m[2]}, []string{m[3], m[4]}
	if second[1] == "ran it" {
		first, second = second, first
	}
	done := regexp.MustCompile(`^(waited, then )?already done by scheduler-` + first[0] + `$`)
	if first[1] != "ran it" || first[0] == second[0] || !done.MatchString(second[1]) || m[5] != first[0] {
		t.Errorf("2026-11-30: want one scheduler to run it, the other to find it done by that one, and its report:\n%s", out)
	}
}
