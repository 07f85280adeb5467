#!/usr/bin/env bash
# Runs every benchmark of the repository and writes docs/benchmarks.md: the go test
# benchmarks (root package, stores, idemhttp, consumers), the pgstore/pgbench comparison
# (scripts/bench-pgbench.sh), the gateway load benchmark (scripts/bench-gateway.sh →
# docs/bench/gateway.md) and the idemhttp/Fiber side by side (→ docs/bench/fiber.md), then the
# per-area reports in docs/bench/*.md. Every step is time-boxed; the whole takes about
# 10-15 minutes on 2 cores.
#
# usage: scripts/bench.sh
# env:   IDEM_BENCH_SKIP_GOTEST=1 skips the go test benchmarks; IDEM_BENCH_SKIP_SERVICES=1 does
#        not start services first (scripts/services.sh); IDEM_BENCH_ASSEMBLE_ONLY=1 runs
#        nothing and rebuilds docs/benchmarks.md from the reports already in docs/bench/ (after
#        running one area's script by hand, for example).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out="$root/docs/benchmarks.md"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The raw outputs of the go test benchmarks and of the pgbench comparison, kept so that the
# report can be assembled again without running them.
raw="$root/docs/bench/raw"
mkdir -p "$raw"
assemble_only=${IDEM_BENCH_ASSEMBLE_ONLY:-0}
started=$(date -u +'%Y-%m-%d %H:%M UTC')
t0=$SECONDS
mkdir -p bin docs/bench

if [ "$assemble_only" != 1 ]; then
if [ "${IDEM_BENCH_SKIP_SERVICES:-0}" != 1 ]; then
	bash scripts/services.sh >"$work/services.log" 2>&1 || { cat "$work/services.log" >&2; exit 1; }
fi

machine() {
	echo "- CPUs: $(nproc) × $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
	echo "- memory: $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo); kernel $(uname -r)"
	echo "- $(go version)"
	echo "- load average (1, 5, 15 min) at $1: $(cut -d' ' -f1-3 /proc/loadavg)"
}
machine "start" >"$raw/machine-start.md"
echo "started $started at commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)" >"$raw/started.txt"

# 1. go test benchmarks, in the packages that have them.
pkgs=()
for p in . ./idemhttp ./idemclient ./idemgrpc ./store/* ./consumer ./consumer/*; do
	[ -d "$p" ] && ls "$p"/*_test.go >/dev/null 2>&1 && grep -qs '^func Benchmark' "$p"/*_test.go && pkgs+=("$p")
done
gotest_cmd="go test -run '^\$' -bench . -benchmem -count 1 -benchtime 1s PKG   # for each of: ${pkgs[*]}"
# Each package gets at most 3 minutes and all of them 9 minutes, so one slow or stuck benchmark
# cannot take the report down with it.
if [ "${IDEM_BENCH_SKIP_GOTEST:-0}" != 1 ] && [ ${#pkgs[@]} -gt 0 ]; then
	budget_end=$((SECONDS + 540))
	: >"$raw/gotest.txt"
	for p in "${pkgs[@]}"; do
		left=$((budget_end - SECONDS))
		if [ "$left" -lt 20 ]; then
			echo "($p skipped: the 9-minute budget of the go test benchmarks ran out)" >>"$raw/gotest.txt"
			continue
		fi
		lim=$((left < 180 ? left : 180))
		echo "bench: go test -bench . $p (at most ${lim}s)" >&2
		timeout --kill-after=10s "${lim}s" go test -run '^$' -bench . -benchmem -count 1 -benchtime 1s -timeout "${lim}s" "$p" \
			>>"$raw/gotest.txt" 2>&1 || echo "($p: go test exited with status $? within its ${lim}s limit)" >>"$raw/gotest.txt"
	done
else
	echo "(skipped)" >"$raw/gotest.txt"
fi

# 2. pgstore against pgbench running the same statements (the pgstore engineer's script).
pgbench_cmd="scripts/bench-pgbench.sh 5 2"
if [ -x scripts/bench-pgbench.sh ] || [ -f scripts/bench-pgbench.sh ]; then
	echo "bench: $pgbench_cmd" >&2
	timeout --kill-after=30s 5m bash scripts/bench-pgbench.sh 5 2 >"$raw/pgbench.txt" 2>&1 ||
		echo "(bench-pgbench.sh exited with status $?)" >>"$raw/pgbench.txt"
else
	echo "(scripts/bench-pgbench.sh not present)" >"$raw/pgbench.txt"
fi

# 2b. redisstore against redis-benchmark, interleaved in one session (docs/bench/redis-run.md).
redis_cmd="IDEM_REDIS_BENCH=1 go test -count=1 -run TestBenchVsRedisBenchmark -v ./store/redisstore/"
echo "bench: $redis_cmd" >&2
{
	echo "# redisstore against redis-benchmark: the latest run"
	echo
	echo "Measured $(date -u +'%Y-%m-%d %H:%M UTC') at commit $(git rev-parse --short HEAD), load average $(cut -d' ' -f1-3 /proc/loadavg) at the start."
	echo "Command: \`$redis_cmd\` (\`make bench-redis\`); what it measures is described in the redisstore section."
	echo
	echo '```'
	timeout --kill-after=30s 10m env IDEM_REDIS_BENCH=1 go test -count=1 -run TestBenchVsRedisBenchmark -v ./store/redisstore/ 2>&1 |
		sed -n 's/^ *bench_test.go:[0-9]*: //p; /^--- /p' || true
	echo '```'
} >docs/bench/redis-run.md

# 2c. Transaction mode over HTTP against the same handler without idem (docs/bench/transactions.md).
timeout --kill-after=30s 10m env IDEM_TX_BENCH="$root/docs/bench/transactions.md" go test -count=1 -timeout 10m -run TestRates ./internal/txbench/ >/dev/null || echo "bench: internal/txbench exited with status $?" >&2

# 3. The gateway load benchmark (docs/bench/gateway.md).
echo "bench: scripts/bench-gateway.sh" >&2
bash scripts/bench-gateway.sh

# 4. idemhttp and Fiber's idempotency middleware, side by side (docs/bench/fiber.md).
echo "bench: bin/idembench middleware --out docs/bench/fiber.md" >&2
timeout --kill-after=30s 10m bin/idembench middleware --out docs/bench/fiber.md
# 4b. Memory per slow connection declaring the largest body, idemhttp against bare net/http
# (docs/bench/slowbodies.md).
echo "bench: scripts/bench-slowbodies.sh" >&2
timeout --kill-after=30s 5m bash scripts/bench-slowbodies.sh ||
	echo "bench: scripts/bench-slowbodies.sh exited with status $?" >&2
timeout --kill-after=30s 60m bash scripts/bench-retention.sh || echo "bench: scripts/bench-retention.sh exited with status $? (docs/bench/retention.md: 0/1M/10M-record tables, Redis memory per record)" >&2
# 5. The same four servers' instructions per request under callgrind: reproducible whatever the
# machine's load (docs/bench/instructions.md).
if command -v valgrind >/dev/null; then
	echo "bench: scripts/bench-instructions.sh" >&2
	timeout --kill-after=30s 15m bash scripts/bench-instructions.sh >/dev/null ||
		echo "bench: scripts/bench-instructions.sh exited with status $?" >&2
else
	echo "bench: valgrind not installed: docs/bench/instructions.md not refreshed" >&2
fi
# 5b. The gateway's new-key rate on PostgreSQL while the paced sweeper removes a backlog (docs/bench/sweep.md).
IDEM_SWEEP_BENCH=1 IDEM_SWEEP_BENCH_OUT=docs/bench/sweep.md timeout --kill-after=30s 15m go test -count=1 -timeout 14m -run TestBenchSweepGateway ./store/sweeper/ >&2 || echo "bench: the sweep benchmark exited with status $?" >&2
# 5c. OpenTelemetry's overhead on the middleware and the gateway (docs/bench/otel.md).
echo "bench: scripts/bench-otel.sh" >&2
timeout --kill-after=30s 10m bash scripts/bench-otel.sh || echo "bench: scripts/bench-otel.sh exited with status $?" >&2
machine "end" >"$raw/machine-end.md"
fi # assemble_only

# 6. Assemble docs/benchmarks.md.
# (In an assemble-only run the commands were not run here; they are named as the full run runs them.)
gotest_cmd=${gotest_cmd:-"go test -run '^\$' -bench . -benchmem -count 1 -benchtime 1s PKG   # for each package with benchmarks"}
pgbench_cmd=${pgbench_cmd:-"scripts/bench-pgbench.sh 5 2"}
redis_cmd=${redis_cmd:-"IDEM_REDIS_BENCH=1 go test -count=1 -run TestBenchVsRedisBenchmark -v ./store/redisstore/"}
# demote FILE: prints FILE with every Markdown heading outside code fences one level down.
demote() { awk '/^```/ { fence = !fence } !fence && /^#{1,5} / { $0 = "#" $0 } { print }' "$1"; }
{
	echo "# Benchmarks"
	echo
	if [ "$assemble_only" = 1 ]; then
		echo "Assembled by \`IDEM_BENCH_ASSEMBLE_ONLY=1 scripts/bench.sh\` on $started at commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
		echo "from the per-area reports in docs/bench/, each of which says when, at which load and with which command it"
		echo "was measured. The machine section, the pgbench comparison and the go test benchmarks are from the last full"
		echo "run of \`scripts/bench.sh\`, $(cat "$raw/started.txt" 2>/dev/null || echo 'date unknown')."
	else
		echo "Generated by \`scripts/bench.sh\` (\`make bench\`), started $started, took $(((SECONDS - t0) / 60)) min $(((SECONDS - t0) % 60)) s,"
		echo "at commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')."
	fi
	echo "Every figure is set beside a baseline measured in the same run, as a ratio; absolute rates on this shared"
	echo "2-core machine are noisy, the ratios much less so. Only figures printed by the commands below appear here."
	echo
	echo "## Machine"
	echo
	cat "$raw/machine-start.md"
	grep 'load average' "$raw/machine-end.md"
	echo
	echo "## Commands"
	echo
	echo '```sh'
	echo "$gotest_cmd"
	echo "$pgbench_cmd"
	echo "$redis_cmd   # → docs/bench/redis-run.md"
	echo "scripts/bench-gateway.sh   # bin/idembench gateway --idem bin/idem --postgres \$IDEM_POSTGRES_URL --out docs/bench/gateway.md"
	echo "bin/idembench middleware --out docs/bench/fiber.md"
	echo "scripts/bench-slowbodies.sh   # go test -run '^\$' -bench SlowBodies -benchtime 1x ./idemhttp/ → docs/bench/slowbodies.md"
	echo "scripts/bench-instructions.sh   # callgrind: instructions per request → docs/bench/instructions.md"
	echo "scripts/bench-otel.sh   # OpenTelemetry's overhead → docs/bench/otel.md"
	echo '```'
	echo
	# The per-area reports, gateway and Fiber first, each heading one level down.
	for f in docs/bench/gateway.md docs/bench/fiber.md docs/bench/instructions.md docs/bench/*.md; do
		case " ${seen:-} " in *" $f "*) continue ;; esac
		seen="${seen:-} $f"
		[ -f "$f" ] || continue
		demote "$f"
		echo
		echo "_(from \`$f\`)_"
		echo
	done
	echo "## pgstore against pgbench (scripts/bench-pgbench.sh)"
	echo
	echo "pgstore's Reserve + Complete (Go benchmark, 16 goroutines) against pgbench running the same two statements, rounds alternating; ratio = pgstore ops/s ÷ pgbench TPS. newkey: each statement its own transaction, as pgbench runs them; newkey-groupcommit: pgstore with Options.GroupCommit 2 (the gateway's default), concurrent calls sharing transactions."
	echo
	echo '```'
	cat "$raw/pgbench.txt"
	echo '```'
	echo
	echo "## go test benchmarks"
	echo
	echo "Raw output of the go test command above, package by package. Each package's benchmarks carry their own baselines (see the per-area sections above for the ratios)."
	echo
	echo '```'
	cat "$raw/gotest.txt"
	echo '```'
} >"$out"
echo "bench: wrote $out in $((SECONDS - t0)) s" >&2
