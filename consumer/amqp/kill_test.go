package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/amqp"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/pgstore"
)

// The child process: a consumer that shares a pgstore with its siblings and writes one
// effect row per charge; with probability IDEM_CHILD_KILL it SIGKILLs itself after the effect
// and its completion, before the ack. SIGTERM stops it gracefully.
const childEnv = "IDEM_AMQP_CHILD"

func childMain() int {
	env := func(k string) string { return os.Getenv("IDEM_CHILD_" + k) }
	killRate, _ := strconv.ParseFloat(env("KILL"), 64)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	fail := func(err error) int {
		if ctx.Err() != nil {
			return 0 // stopped while starting up
		}
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}

	st, err := pgstore.Open(ctx, env("PG"), pgstore.Options{Table: env("STORE")})
	if err != nil {
		return fail(err)
	}
	defer st.Close()
	var runner consumer.Runner = pgstore.NewTxRunner(st, pgstore.TxOptions{})
	if env("MODE") == "engine" {
		if runner, err = idem.New(st, idem.Options{Lease: 5 * time.Second, Logger: quiet()}); err != nil {
			return fail(err)
		}
	}
	conc, _ := strconv.Atoi(env("CONC"))
	effects := env("EFFECTS")
	c, err := consumer.New(consumer.Options{Runner: runner, Scope: "killtest", InFlightDelay: 200 * time.Millisecond, Logger: quiet(),
		Key: func(m *consumer.Message) (string, error) { return string(m.Body), nil }}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		var db interface {
			Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
		} = st.Pool()
		if tx := pgstore.TxFromContext(ctx); tx != nil {
			db = tx // the effect commits with the claim's completion, or not at all
		}
		_, err := db.Exec(ctx, "INSERT INTO "+effects+" (key, pid) VALUES ($1, $2)", string(m.Body), os.Getpid())
		return nil, err
	})
	if err != nil {
		return fail(err)
	}
	conn, err := amqp091.Dial(env("AMQP"))
	if err != nil {
		return fail(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fail(err)
	}
	opt := amqp.WithBeforeAck(amqp.Options{Concurrency: conc, Logger: quiet()}, func(consumer.Result) bool {
		if rand.Float64() < killRate {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			time.Sleep(time.Minute) // the signal arrives
		}
		return false
	})
	if err := amqp.Run(ctx, ch, env("QUEUE"), c, opt); err != nil {
		return fail(err)
	}
	return 0
}

// Consumer processes are killed (SIGKILL, by themselves at a random delivery) after the
// effect and before the ack, over at least 1,000 messages; RabbitMQ requeues what they held,
// the redeliveries go to the surviving or restarted processes, and no effect runs twice and
// none is lost. The processes share a PostgreSQL idem store (pgstore) and effects table.
//
// With the engine, each process handles one delivery at a time, so that every kill falls
// between an effect and its ack. (With several at a time, a kill also cuts the other
// deliveries short, some between their effect and its completion: those are redelivered,
// held off as in flight until the lease runs out, then taken over and run again, the
// at-least-once exception idem documents for a holder that died mid-effect.) With pgstore's
// TxRunner, which commits effect and completion together, processes handle four at a time and
// every kill, wherever it falls, still leaves each effect exactly once.
func TestKilledProcessDoesNotRepeatEffect(t *testing.T) {
	if testing.Short() {
		t.Skip("starts consumer processes")
	}
	t.Parallel()
	for _, tc := range []struct{ mode, conc string }{{"engine", "1"}, {"tx", "4"}} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			killTest(t, tc.mode, tc.conc)
		})
	}
}

func killTest(t *testing.T, mode, conc string) {
	pgURL := testenv.PostgresURL(t)
	q := newQueue(t)
	if q == nil || pgURL == "" {
		return
	}
	ctx := context.Background()
	db, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	id := randHex(5)
	effects, storeTable := "killtest_effects_"+id, "killtest_idem_"+id
	if _, err := db.Exec(ctx, "CREATE TABLE "+effects+" (key text NOT NULL, pid int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec(context.Background(), "DROP TABLE IF EXISTS "+effects+", "+storeTable) })
	st, err := pgstore.New(db, pgstore.Options{Table: storeTable})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	const events, processes = 500, 3
	var bodies []string
	for i := range events {
		key := fmt.Sprintf("order-%s-%d", id, i)
		bodies = append(bodies, key, key) // every event twice, each with its own message id
	}
	rand.Shuffle(len(bodies), func(i, j int) { bodies[i], bodies[j] = bodies[j], bodies[i] })
	for _, b := range bodies {
		if err := q.Publish(ctx, []byte(b)); err != nil {
			t.Fatal(err)
		}
	}

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var kills, exits atomic.Int64
	start := func(killRate float64) *exec.Cmd {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=1",
			"IDEM_CHILD_PG="+pgURL, "IDEM_CHILD_STORE="+storeTable, "IDEM_CHILD_EFFECTS="+effects,
			"IDEM_CHILD_AMQP="+q.url, "IDEM_CHILD_QUEUE="+q.name, "IDEM_CHILD_MODE="+mode, "IDEM_CHILD_CONC="+conc, "IDEM_CHILD_KILL="+strconv.FormatFloat(killRate, 'g', -1, 64))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	// supervise keeps n processes running, restarting the killed ones, until stop is closed;
	// then it stops them with SIGTERM and waits.
	supervise := func(n int, killRate float64, stop chan struct{}) *sync.WaitGroup {
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					cmd := start(killRate)
					exited := make(chan error, 1)
					go func() { exited <- cmd.Wait() }()
					select {
					case err := <-exited:
						var ee *exec.ExitError
						if errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL {
							kills.Add(1)
							continue
						}
						exits.Add(1)
						t.Errorf("consumer process exited: %v", err)
						return
					case <-stop:
						_ = cmd.Process.Signal(syscall.SIGTERM)
						// A process still starting up dies of the signal: also a clean stop. So
						// does one that killed itself between an effect and its ack just before
						// the signal came (SIGKILL), as the test has it do at any moment.
						err := <-exited
						var ee *exec.ExitError
						if errors.As(err, &ee) {
							switch ee.Sys().(syscall.WaitStatus).Signal() {
							case syscall.SIGTERM:
								err = nil
							case syscall.SIGKILL:
								kills.Add(1)
								err = nil
							}
						}
						if err != nil {
							t.Errorf("consumer process did not stop cleanly: %v", err)
						}
						return
					}
				}
			}()
		}
		return &wg
	}
	count := func() (rows, distinct int) {
		if err := db.QueryRow(ctx, "SELECT count(*), count(DISTINCT key) FROM "+effects).Scan(&rows, &distinct); err != nil {
			t.Fatal(err)
		}
		return rows, distinct
	}

	stop := make(chan struct{})
	wg := supervise(processes, 0.02, stop)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		_, distinct := count()
		st, err := q.adm.QueueDeclarePassive(q.name, false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if distinct == events && st.Messages == 0 {
			break
		}
		if time.Now().After(deadline) || t.Failed() {
			close(stop)
			wg.Wait()
			t.Fatalf("gave up: %d/%d events done, %d messages ready, %d kills", distinct, events, st.Messages, kills.Load())
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	// Whatever a killed process held comes back; drain it with processes that are not killed.
	for round := 0; ; round++ {
		n, err := q.Pending(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if round == 10 {
			t.Fatalf("%d messages left in the queue", n)
		}
		stop := make(chan struct{})
		wg := supervise(1, 0, stop)
		time.Sleep(time.Second)
		close(stop)
		wg.Wait()
	}
	rows, distinct := count()
	t.Logf("%d messages, %d events, %d processes killed between effect and ack, %d effect rows", len(bodies), events, kills.Load(), rows)
	if rows != events || distinct != events {
		t.Fatalf("%d effect rows for %d distinct events, want exactly %d", rows, distinct, events)
	}
	if kills.Load() == 0 {
		t.Fatal("no process was killed; the test did not test kills")
	}
}
