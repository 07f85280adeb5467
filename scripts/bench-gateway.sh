#!/usr/bin/env bash
# The gateway load benchmark (issue 6): the idem serve binary against a bare, tuned
# httputil.ReverseProxy to the same upstream, in one run (pass-through, new key, replay on the
# memory store; new key on PostgreSQL against pgbench with the same two statements; peak RSS
# with thousands of keys in flight). Writes docs/bench/gateway.md. Takes about 5 minutes.
# Five rounds by default: on a shared 2-core machine the rates swing between runs seconds apart,
# and the medians of five pairs hold better than of three.
#
# usage: scripts/bench-gateway.sh [idembench gateway flags, e.g. --duration 5s --rounds 5]
# env:   IDEM_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test?sslmode=disable);
#        IDEM_BENCH_POSTGRES=0 skips the PostgreSQL figures.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
mkdir -p "$bin" "$root/docs/bench"
(cd "$root" && go build -o "$bin/idem" ./cmd/idem)
(cd "$root/bench" && go build -o "$bin/idembench" ./cmd/idembench)

args=(--idem "$bin/idem" --out "$root/docs/bench/gateway.md" --rounds 5)
pg=${IDEM_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
if [ "${IDEM_BENCH_POSTGRES:-1}" != 0 ]; then
	if pg_isready -q -d "$pg" 2>/dev/null; then
		args+=(--postgres "$pg")
	else
		echo "bench-gateway: PostgreSQL is not reachable at $pg: skipping its figures" >&2
	fi
fi
# Bounded: the run itself stops every process it started; this is the outer limit.
timeout --kill-after=30s 15m "$bin/idembench" gateway "${args[@]}" "$@"
echo "bench-gateway: wrote docs/bench/gateway.md" >&2
