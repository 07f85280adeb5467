//go:build chaos

package consumerchaos_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/amqp"
	"github.com/idemkit/idem/consumer/natsjs"
	"github.com/idemkit/idem/consumer/redisstream"
	"github.com/idemkit/idem/consumer/sqs"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store/pgstore"
)

// The worker: the test binary run again with workerEnv set. It consumes the run's stream or
// queue through the broker relay, with a pgstore reached through the store relay, and writes
// one effect row per execution. It logs every Result (from the consumer's OnEvent hook, so
// before the ack) and every kill it inflicts on itself to stdout, one line each:
//
//	D <fact> <outcome> <unstored 0|1> <takeover 0|1> <unix nanoseconds>
//	K <where> <unix nanoseconds>
//
// SIGTERM stops it gracefully (exit 0).
const workerEnv = "IDEM_CCHAOS_WORKER"

// Rates of the faults a worker inflicts on itself, unless it runs calm.
const (
	failRate      = 0.04  // the handler fails before its effect (nack, redelivery)
	slowRate      = 0.01  // the handler takes longer than the broker's ack wait
	killMidRate   = 0.01  // SIGKILL after the effect row, before the completion
	killAckRate   = 0.008 // SIGKILL after the completion, before the ack
	workerConc    = 4     // messages a worker handles at once
	engineLease   = 2 * time.Second
	natsAckWait   = 2 * time.Second
	slowEffectFor = 2500 * time.Millisecond
	redisMinIdle  = 2 * time.Second // the stream group's redelivery timeout
	sqsVisibility = 3 * time.Second // whole seconds
)

type fact struct {
	Fact   string `json:"fact"`
	Amount int    `json:"amount"`
	Copy   int    `json:"copy"` // which publication of the fact this message is
	Sent   int64  `json:"sent"`
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

var outMu sync.Mutex

func logLine(format string, args ...any) {
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

func killSelf(where string) {
	logLine("K %s %d", where, time.Now().UnixNano())
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	time.Sleep(time.Minute) // the signal arrives
}

func workerMain() int {
	env := func(k string) string { return os.Getenv("IDEM_CCHAOS_" + k) }
	name, calm, bug := env("NAME"), env("CALM") == "1", env("BUG")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	chance := func(p float64) bool { return !calm && rand.Float64() < p }

	// The store, through the relay; a cut while opening it is retried.
	var st *pgstore.Store
	for {
		var err error
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err = pgstore.Open(octx, env("PG"), pgstore.Options{Table: env("STORE")})
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return 0
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer st.Close()
	// The effects of engine mode go straight to PostgreSQL: the effect is the user's, outside
	// the store, and certain once written.
	direct, err := pgxpool.New(ctx, env("PG_DIRECT"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	defer direct.Close()
	var runner consumer.Runner = pgstore.NewTxRunner(st, pgstore.TxOptions{Wait: 3 * time.Second})
	if env("MODE") == "engine" {
		if runner, err = idem.New(st, idem.Options{Lease: engineLease, Logger: quiet()}); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			return 2
		}
	}
	insert := "INSERT INTO " + env("EFFECTS") + " (fact, worker, at) VALUES ($1, $2, $3)"
	parse := func(m *consumer.Message) fact {
		var f fact
		_ = json.Unmarshal(m.Body, &f)
		return f
	}
	scope := "cchaos"
	if bug == "scope" {
		scope += "-" + name // planted: each worker its own scope, as if the store ignored it
	}
	c, err := consumer.New(consumer.Options{
		Runner: runner,
		Scope:  scope, InFlightDelay: 300 * time.Millisecond, RetryDelay: 50 * time.Millisecond, Logger: quiet(),
		Key: func(m *consumer.Message) (string, error) {
			if env("SOURCE") == "outbox" {
				if bug == "transportid" {
					return m.ID, nil // planted: the broker's id of the delivery, not the event's key
				}
				return outbox.KeyOf(m.Header) // the event's key, as every outbox consumer reads it
			}
			if f := parse(m); f.Fact != "" {
				return f.Fact, nil
			}
			return "", errors.New("no fact")
		},
		// The copies of a fact differ in their send time and copy number, not in the fact.
		Fingerprint: func(m *consumer.Message) (string, error) {
			f := parse(m)
			return idem.Fingerprint([]byte(f.Fact + "/" + strconv.Itoa(f.Amount))), nil
		},
		OnEvent: func(ev consumer.Event) {
			m, r := ev.Message, ev.Result
			unstored := r.Outcome == consumer.OutcomeExecuted && r.Err != nil
			logLine("D %s %s %d %d %d", parse(m).Fact, r.Outcome, b2i(unstored), b2i(r.Takeover), time.Now().UnixNano())
			if r.Outcome.Ack() && chance(killAckRate) {
				killSelf("before-ack")
			}
		},
	}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		f := parse(m)
		if chance(failRate) {
			return nil, errors.New("chaos: failed before the effect")
		}
		d := time.Duration(rand.IntN(15)) * time.Millisecond
		if chance(slowRate) {
			d = slowEffectFor
		}
		// As a user's handler does: once the claim is lost (ctx is cancelled with
		// idem.ErrLeaseLost when the lease could not be renewed), the effect does not start.
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if tx := pgstore.TxFromContext(ctx); tx != nil {
			if _, err := tx.Exec(ctx, insert, f.Fact, name, time.Now()); err != nil {
				return nil, err
			}
		} else if _, err := direct.Exec(context.WithoutCancel(ctx), insert, f.Fact, name, time.Now()); err != nil {
			return nil, err
		}
		if chance(killMidRate) {
			killSelf("mid-effect")
		}
		time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
		return []byte(name), nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	switch env("BROKER") {
	case "nats":
		err = consumeNATS(ctx, c, env("BROKER_URL"), env("TARGET"), bug)
	case "amqp":
		err = consumeAMQP(ctx, c, env("BROKER_URL"), env("TARGET"), bug)
	case "redis":
		err = consumeRedis(ctx, c, env("BROKER_URL"), env("TARGET"), name)
	case "sqs":
		err = consumeSQS(ctx, c, env("BROKER_URL"), env("TARGET"))
	default:
		err = fmt.Errorf("unknown broker %q", env("BROKER"))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	return 0
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// consumeNATS runs natsjs.Run until ctx is done, reconnecting through the relay's cuts.
func consumeNATS(ctx context.Context, c *consumer.Consumer, url, stream, bug string) error {
	for ctx.Err() == nil {
		nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.Timeout(2*time.Second))
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		err = func() error {
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return nil
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			cons, err := js.Consumer(cctx, stream, "work")
			cancel()
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				return nil
			}
			if bug == "ackfirst" {
				// Planted: the message is acked before its effect and completion.
				hctx := context.WithoutCancel(ctx)
				cc, err := cons.Consume(func(msg jetstream.Msg) {
					_ = msg.Ack()
					c.Handle(hctx, natsjs.Message(msg, 0))
				}, jetstream.PullMaxMessages(workerConc))
				if err != nil {
					return nil
				}
				<-ctx.Done()
				cc.Stop()
				return nil
			}
			if err := natsjs.Run(ctx, cons, c, natsjs.Options{Concurrency: workerConc, Logger: quiet()}); err != nil && !errors.Is(err, natsjs.ErrClosed) {
				return err
			}
			return nil
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

// consumeAMQP runs amqp.Run until ctx is done, dialling again after each cut.
func consumeAMQP(ctx context.Context, c *consumer.Consumer, url, queue, bug string) error {
	for ctx.Err() == nil {
		conn, err := amqp091.DialConfig(url, amqp091.Config{Dial: amqp091.DefaultDial(2 * time.Second)})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		func() {
			defer conn.Close()
			ch, err := conn.Channel()
			if err != nil {
				return
			}
			if bug == "ackfirst" {
				// Planted: the broker forgets each delivery as it sends it (auto-ack).
				ds, err := ch.ConsumeWithContext(ctx, queue, "", true, false, false, false, nil)
				if err != nil {
					return
				}
				hctx := context.WithoutCancel(ctx)
				for d := range ds {
					c.Handle(hctx, amqp.Message(d))
				}
				return
			}
			err = amqp.Run(ctx, ch, queue, c, amqp.Options{Concurrency: workerConc, Logger: quiet()})
			if err != nil && !errors.Is(err, amqp.ErrClosed) {
				fmt.Fprintln(os.Stderr, "worker: amqp:", err)
			}
		}()
		if ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// consumeRedis runs a redisstream.Worker until ctx is done; the client reconnects through the
// relay's cuts.
func consumeRedis(ctx context.Context, c *consumer.Consumer, addr, stream, name string) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 2 * time.Second})
	defer rdb.Close()
	w, err := redisstream.NewWorker(rdb, c, redisstream.Options{Stream: stream, Group: "work", Consumer: name,
		Concurrency: workerConc, Block: 200 * time.Millisecond, MinIdle: redisMinIdle, ClaimEvery: 200 * time.Millisecond, Logger: quiet()})
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		if err := w.Run(ctx); err != nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// consumeSQS runs an sqs.Worker until ctx is done.
func consumeSQS(ctx context.Context, c *consumer.Consumer, endpoint, queueURL string) error {
	api := awssqs.NewFromConfig(sqs.Config(sqs.ConfigOptions{Endpoint: endpoint}))
	w, err := sqs.NewWorker(api, c, sqs.WorkerOptions{QueueURL: queueURL, WaitTime: time.Second,
		VisibilityTimeout: sqsVisibility, Concurrency: workerConc, Logger: quiet()})
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		if err := w.Run(ctx); err != nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}
