// Command retentionbench measures what keeping records costs idem's stores (package
// bench/retention) and writes the figures as Markdown.
//
//	retentionbench [-sizes 0,1000000,10000000] [-engines postgres,mysql,sqlite] [-run 5s] [-rounds 3] [-redis-records 50000]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem/bench/retention"
)

func main() {
	sizes := flag.String("sizes", "0,1000000,10000000", "records in the tables, comma-separated")
	engines := flag.String("engines", "postgres,mysql,sqlite", "SQL engines, comma-separated (empty: none)")
	run := flag.Duration("run", 5*time.Second, "length of one run")
	rounds := flag.Int("rounds", 3, "rounds, the sizes interleaved")
	warmup := flag.Int("warmup", 1, "rounds run first and not counted (0: none)")
	clients := flag.Int("clients", 16, "goroutines calling the store")
	dir := flag.String("sqlite-dir", os.TempDir(), "directory of the SQLite files")
	keep := flag.Bool("keep", false, "keep the filled tables (and reuse them next time)")
	redisN := flag.Int("redis-records", 50000, "records written per body size to measure Redis memory (0: skip)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := mainErr(ctx, *sizes, *engines, *run, *rounds, *warmup, *clients, *dir, *keep, *redisN); err != nil {
		fmt.Fprintln(os.Stderr, "retentionbench:", err)
		os.Exit(1)
	}
}

func mainErr(ctx context.Context, sizes, engines string, run time.Duration, rounds, warmup, clients int, dir string, keep bool, redisN int) error {
	cfg := retention.SQLConfig{Run: run, Rounds: rounds, Warmup: warmup, Clients: clients, SQLiteDir: dir, Keep: keep, Progress: os.Stderr,
		PostgresURL: os.Getenv("IDEM_POSTGRES_URL"), MySQLDSN: os.Getenv("IDEM_MYSQL_URL")}
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			return fmt.Errorf("-sizes: %q is not a number of records", s)
		}
		cfg.Sizes = append(cfg.Sizes, n)
	}
	for _, e := range strings.Split(engines, ",") {
		if e = strings.TrimSpace(e); e != "" {
			cfg.Engines = append(cfg.Engines, e)
		}
	}
	if len(cfg.Engines) > 0 {
		results, err := retention.SQL(ctx, cfg)
		if err != nil {
			return err
		}
		fmt.Printf("## Records in the table: new key and uncached replay\n\n")
		fmt.Printf("%d goroutines call the store directly (no engine cache), %s per run, %d rounds with the sizes interleaved%s; ratio = the rate with that many records ÷ the rate of the smallest table in the same round. The records a new-key run adds are deleted after it, outside its time, so that every run finds its table at its size.\n", cfg.Clients, cfg.Run, cfg.Rounds, warmupText(warmup))
		retention.WriteSQL(os.Stdout, results)
		fmt.Println()
	}
	if redisN > 0 {
		addr := os.Getenv("IDEM_REDIS_ADDR")
		if addr == "" {
			addr = "127.0.0.1:6379"
		}
		rs, err := retention.RedisMemory(ctx, addr, redisN, []int{16, 1024})
		if err != nil {
			return err
		}
		fmt.Printf("## Memory per record: Redis, and DynamoDB's item size\n\n")
		fmt.Printf("Completed records written through redisstore (a 24h window, a 61-byte key, response 201 with a Content-Type header), then measured and deleted.\n\n")
		retention.WriteRedis(os.Stdout, rs)
		fmt.Println()
	}
	return nil
}

// warmupText says what the uncounted rounds were, for the report's text.
func warmupText(n int) string {
	switch {
	case n < 1:
		return ""
	case n == 1:
		return ", after one warm-up round of every run, not counted"
	}
	return fmt.Sprintf(", after %d warm-up rounds of every run, not counted", n)
}
