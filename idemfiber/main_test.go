package idemfiber_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a test leaves a goroutine behind: a server not shut down, or an
// engine still renewing a lease. Two fasthttp goroutines are not counted: its worker-pool
// cleaner, which outlives a shut-down server by up to ten seconds (it sleeps before it looks),
// and the process-wide one that updates the Date header every second. Nor are two that Fiber's
// idempotency middleware, which the benchmarks compare against, starts and never stops: the
// collector of its in-memory storage and its clock.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/gofiber/fiber/v2/internal/storage/memory.(*Storage).gc"),
		goleak.IgnoreAnyFunction("github.com/gofiber/fiber/v2/utils.StartTimeStampUpdater.func1.1"))
}
