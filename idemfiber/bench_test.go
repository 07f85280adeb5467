package idemfiber_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/idempotency"
	"github.com/valyala/fasthttp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemfiber"
	"github.com/idemkit/idem/store/memstore"
)

// benchBody is what every target answers, status 201: the 86-byte payment of the idem
// benchmarks.
var benchBody = []byte(`{"id":"ch_1","object":"charge","amount":1000,"currency":"eur","status":"succeeded"}`)

// benchApp is a Fiber app answering POST with 201 and benchBody, behind mw if not nil.
func benchApp(mw fiber.Handler) fasthttp.RequestHandler {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	if mw != nil {
		app.Use(mw)
	}
	app.Post("/*", func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Status(fiber.StatusCreated).Send(benchBody)
	})
	return app.Handler()
}

// benchTargets are the three servers compared: bare Fiber, Fiber's own idempotency middleware
// (its in-memory lock and storage, as github.com/idemkit/idem/bench configures it), and
// idemfiber (memstore, the engine's cache of 10,000 completed records, every other option at
// its default, as the idemhttp benchmark).
func benchTargets(tb testing.TB) []benchTarget {
	eng, err := idem.New(memstore.New(), idem.Options{CacheSize: 10_000})
	if err != nil {
		tb.Fatal(err)
	}
	mw, err := idemfiber.New(idemfiber.Options{Runner: eng, Scope: idemfiber.SingleCaller()})
	if err != nil {
		tb.Fatal(err)
	}
	return []benchTarget{
		{"bare Fiber", benchApp(nil)},
		{"Fiber + idempotency", benchApp(idempotency.New(idempotency.Config{KeyHeader: "Idempotency-Key", Lifetime: 24 * time.Hour}))},
		{"Fiber + idemfiber", benchApp(mw)},
	}
}

type benchTarget struct {
	name string
	h    fasthttp.RequestHandler
}

// serve runs n requests through h on one goroutine: a POST of a 15-byte JSON body with a
// 36-byte key (Fiber's middleware accepts only that length), a new key each time, or the same
// key (answered once before) when replay is set. It checks the first and last answers.
func serve(tb testing.TB, h fasthttp.RequestHandler, n int, replay bool, seq *int) {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(fasthttp.MethodPost)
	ctx.Request.SetRequestURI("/v1/charges")
	ctx.Request.Header.SetContentType("application/json")
	ctx.Request.SetBodyString(`{"amount":1000}`)
	key := []byte("00000000-0000-0000-0000-000000000000")
	next := func() {
		*seq++
		s := strconv.Itoa(*seq)
		copy(key[len(key)-len(s):], s)
		ctx.Request.Header.SetBytesV("Idempotency-Key", key)
	}
	next()
	if replay {
		h(&ctx)
		ctx.Response.Reset()
	}
	for i := range n {
		if !replay {
			next()
		}
		h(&ctx)
		if (i == 0 || i == n-1) && (ctx.Response.StatusCode() != 201 || string(ctx.Response.Body()) != string(benchBody)) {
			tb.Fatalf("answer %d: %d %s", i, ctx.Response.StatusCode(), ctx.Response.Body())
		}
		ctx.Response.Reset()
	}
}

// BenchmarkMiddleware gives ns/op of each target on both paths (one goroutine, no network).
func BenchmarkMiddleware(b *testing.B) {
	for _, replay := range []bool{false, true} {
		for _, t := range benchTargets(b) {
			b.Run(fmt.Sprintf("%s/replay=%v", strings.ReplaceAll(t.name, " ", ""), replay), func(b *testing.B) {
				b.ReportAllocs()
				seq := 0
				serve(b, t.h, b.N, replay, &seq)
			})
		}
	}
}

// cpuTime is this process's user + system CPU time, all threads (garbage collection included).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestAddedCPU compares the CPU each middleware adds per request to bare Fiber, in one run,
// interleaved, and prints the table of docs/bench/fiber-native.md. It runs only when
// IDEMFIBER_BENCH is set (to the number of requests per run; 1 means the default, 100,000).
func TestAddedCPU(t *testing.T) {
	if os.Getenv("IDEMFIBER_BENCH") == "" {
		t.Skip("set IDEMFIBER_BENCH=1 to run the comparison (about a minute)")
	}
	n, _ := strconv.Atoi(os.Getenv("IDEMFIBER_BENCH"))
	if n <= 1 {
		n = 100_000
	}
	const rounds = 5
	targets := benchTargets(t)
	seqs := make([]int, len(targets))
	cpu := map[string][]float64{} // µs per request, one per round
	for r := range rounds {
		for _, replay := range []bool{false, true} {
			for i, tg := range targets {
				runtime.GC()
				before := cpuTime()
				serve(t, tg.h, n, replay, &seqs[i])
				us := float64((cpuTime() - before).Nanoseconds()) / 1e3 / float64(n)
				name := fmt.Sprintf("%s|%v", tg.name, replay)
				cpu[name] = append(cpu[name], us)
				t.Logf("round %d %-20s replay=%-5v %.2f µs/req", r+1, tg.name, replay, us)
			}
		}
	}
	// The engine alone, as idemfiber calls it (a new storage key each time, or one replayed),
	// without Fiber: the part of idemfiber's added CPU that is the claim and the record.
	eng, err := idem.New(memstore.New(), idem.Options{CacheSize: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	engSeq := 0
	for r := range rounds {
		for _, replay := range []bool{false, true} {
			runtime.GC()
			before := cpuTime()
			engineOnly(t, eng, n, replay, &engSeq)
			us := float64((cpuTime() - before).Nanoseconds()) / 1e3 / float64(n)
			cpu[fmt.Sprintf("engine|%v", replay)] = append(cpu[fmt.Sprintf("engine|%v", replay)], us)
			t.Logf("round %d %-20s replay=%-5v %.2f µs/req", r+1, "engine alone", replay, us)
		}
	}
	median := func(v []float64) float64 {
		s := append([]float64(nil), v...)
		for i := range s {
			for j := i + 1; j < len(s); j++ {
				if s[j] < s[i] {
					s[i], s[j] = s[j], s[i]
				}
			}
		}
		return s[len(s)/2]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| path | bare Fiber | Fiber + idempotency | Fiber + idemfiber | added: idempotency | added: idemfiber | idemfiber / idempotency | of which idem.Engine.Do |\n")
	fmt.Fprintf(&b, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, replay := range []bool{false, true} {
		path := "new key"
		if replay {
			path = "replay"
		}
		bare := median(cpu[fmt.Sprintf("bare Fiber|%v", replay)])
		fib := median(cpu[fmt.Sprintf("Fiber + idempotency|%v", replay)])
		ours := median(cpu[fmt.Sprintf("Fiber + idemfiber|%v", replay)])
		fmt.Fprintf(&b, "| %s | %.2f µs | %.2f µs | %.2f µs | %.2f µs | **%.2f µs** | **%.2f×** | %.2f µs |\n",
			path, bare, fib, ours, fib-bare, ours-bare, (ours-bare)/(fib-bare), median(cpu[fmt.Sprintf("engine|%v", replay)]))
	}
	t.Logf("CPU per request, median of %d rounds of %d requests, %s:\n%s", rounds, n, runtime.Version(), b.String())
}

// engineOnly calls eng.Do n times as idemfiber does for serve's requests: the anonymous scope's
// storage key, a precomputed fingerprint, and an effect that returns the answer.
func engineOnly(tb testing.TB, eng *idem.Engine, n int, replay bool, seq *int) {
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("POST"), []byte("/v1/charges"), nil, []byte(`{"amount":1000}`))
	resp := idem.Response{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: benchBody}
	fn := func(context.Context) (idem.Response, error) { return resp, nil }
	key := []byte("|00000000-0000-0000-0000-000000000000")
	next := func() string {
		*seq++
		s := strconv.Itoa(*seq)
		copy(key[len(key)-len(s):], s)
		return string(key)
	}
	k := next()
	if replay {
		if _, err := eng.Do(ctx, k, fp, fn); err != nil {
			tb.Fatal(err)
		}
	}
	for range n {
		if !replay {
			k = next()
		}
		if _, err := eng.Do(ctx, k, fp, fn); err != nil {
			tb.Fatal(err)
		}
	}
}
