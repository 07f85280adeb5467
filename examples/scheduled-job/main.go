// Command scheduled-job runs a daily report once per period, keyed on the period
// ("daily-report/2026-11-30"), even when two schedulers fire at the same moment or one dies
// halfway through and is restarted.
//
//	go run ./examples/scheduled-job
//
// The schedulers share an idem store in a SQLite file (sqlitestore), as separate processes on
// one machine would; on several machines, point them at PostgreSQL (pgstore) or Redis instead.
//
// What it shows:
//
//  1. Two schedulers fire for 2026-11-30 at once: one writes the report; the other finds it in
//     flight, comes back when told, and finds it done.
//  2. A scheduler process starts the report for 2026-12-01 and is killed halfway (SIGKILL).
//     Another scheduler fires: the job is in flight until the dead holder's lease runs out,
//     then it takes over and writes the report. The killed scheduler, restarted, fires again
//     and finds it done.
//
// A job that dies halfway may run again from the start (at-least-once for a holder that
// died), so the job itself is written to be safe to redo: it writes the report to a temporary
// file and renames it into place.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/store/sqlitestore"
)

const lease = 2 * time.Second

func main() {
	dir := flag.String("dir", "", "directory of the store and the reports (default: a new temporary one)")
	fire := flag.String("fire", "", "fire once for this period as -name, then exit (used by the demo's child process)")
	name := flag.String("name", "scheduler", "this scheduler's name")
	hang := flag.Bool("hang-halfway", false, "with -fire: hang halfway through the job, to be killed")
	flag.Parse()
	if *fire != "" {
		s := open(*dir, *name, *hang)
		fmt.Println(s.fire(*fire))
		return
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "scheduled-job-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	demo(*dir)
}

// scheduler fires the report job for a period through an idem consumer.
type scheduler struct {
	name string
	dir  string
	c    *consumer.Consumer
}

func open(dir, name string, hang bool) *scheduler {
	st, err := sqlitestore.Open(context.Background(), filepath.Join(dir, "idem.db"), sqlitestore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// TTL: how long a period stays done. Keep it longer than any scheduler could still fire
	// for the period (a catch-up after a long outage).
	engine, err := idem.New(st, idem.Options{Lease: lease, TTL: 30 * 24 * time.Hour, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	s := &scheduler{name: name, dir: dir}
	s.c, err = consumer.New(consumer.Options{
		Runner: engine,
		Scope:  "reports",
		Key:    func(m *consumer.Message) (string, error) { return "daily-report/" + string(m.Body), nil },
		Logger: quiet,
	}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		return s.report(string(m.Body), hang)
	})
	if err != nil {
		log.Fatal(err)
	}
	return s
}

// report writes the period's report; it is safe to redo (write, then rename into place).
func (s *scheduler) report(period string, hang bool) ([]byte, error) {
	final := filepath.Join(s.dir, "daily-report-"+period+".txt")
	tmp := final + "." + s.name + ".tmp"
	if err := os.WriteFile(tmp, []byte("report for "+period+" by "+s.name+"\n"), 0o644); err != nil {
		return nil, err
	}
	if hang {
		fmt.Println("started") // the demo kills this process now
		time.Sleep(time.Hour)
	}
	time.Sleep(300 * time.Millisecond) // the rest of the work
	if err := os.Rename(tmp, final); err != nil {
		return nil, err
	}
	return []byte(s.name), nil
}

// fire runs the job for period unless it ran already; while another holds it, it comes back
// when told. It returns a line saying what happened.
func (s *scheduler) fire(period string) string {
	waited := false
	for {
		r := s.c.Handle(context.Background(), &consumer.Message{Body: []byte(period)})
		switch r.Outcome {
		case consumer.OutcomeExecuted:
			how := "ran it"
			if r.Takeover {
				how = "took over from a dead holder and ran it"
			}
			return fmt.Sprintf("%s: %s: %s", s.name, r.Key, how)
		case consumer.OutcomeReplay:
			w := ""
			if waited {
				w = "waited, then "
			}
			return fmt.Sprintf("%s: %s: %salready done by %s", s.name, r.Key, w, r.Output)
		case consumer.OutcomeInFlight:
			waited = true
			time.Sleep(r.RetryAfter)
		default:
			return fmt.Sprintf("%s: %s: %s: %v", s.name, r.Key, r.Outcome, r.Err)
		}
	}
}

func demo(dir string) {
	// 1. Two schedulers fire at once.
	a, b := open(dir, "scheduler-A", false), open(dir, "scheduler-B", false)
	var wg sync.WaitGroup
	lines := make([]string, 2)
	for i, s := range []*scheduler{a, b} {
		wg.Add(1)
		go func() { defer wg.Done(); lines[i] = s.fire("2026-11-30") }()
	}
	wg.Wait()
	fmt.Println("two schedulers fire for 2026-11-30 at once:")
	for _, l := range lines {
		fmt.Println("  " + l)
	}

	// 2. A scheduler process dies halfway; another takes over; the restarted one skips.
	fmt.Println("scheduler-A (a process) starts 2026-12-01 and is killed halfway:")
	exe, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	child := exec.Command(exe, "-dir", dir, "-fire", "2026-12-01", "-name", "scheduler-A", "-hang-halfway")
	out, err := child.StdoutPipe()
	if err != nil {
		log.Fatal(err)
	}
	if err := child.Start(); err != nil {
		log.Fatal(err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "started\n" {
		log.Fatalf("child said %q", line)
	}
	_ = child.Process.Kill()
	_ = child.Wait()
	fmt.Println("  killed")
	fmt.Println("  " + b.fire("2026-12-01"))
	fmt.Println("scheduler-A restarts and fires again:")
	fmt.Println("  " + open(dir, "scheduler-A", false).fire("2026-12-01"))

	for _, p := range []string{"2026-11-30", "2026-12-01"} {
		body, err := os.ReadFile(filepath.Join(dir, "daily-report-"+p+".txt"))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("daily-report-%s.txt: %s", p, body)
	}
}
