#!/usr/bin/env bash
# Server instructions per request, counted by valgrind's callgrind: the middleware comparison's
# four servers (bare net/http, net/http + idemhttp on memstore, bare Fiber, Fiber + its
# idempotency middleware), each answering the in-repo load generator, on the new-key and the
# replay path. Instruction counts do not depend on what else the machine is doing (timings on
# this shared 2-core machine swing by 2x), so they show the middleware's own added work
# reproducibly; they do not show cache misses or the cost of a busy machine, and valgrind hides
# the CPU's SHA instructions (SHA-NI) from the program, so SHA-256 is counted as its slower AVX2
# code. Writes docs/bench/instructions.md. Takes about 3 minutes.
#
# Method: each server runs alone under callgrind (GOMAXPROCS=1, asynchronous preemption off:
# callgrind cannot take Go's preemption signals); WARM requests first, then the counters are
# zeroed, N requests are sent (one keep-alive client, so that every request is read and answered alone: no batching that would depend on timing), the counters dumped; instructions / N.
#
# usage: scripts/bench-instructions.sh [WARM [N]]   (default 2000 5000)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
warm=${1:-2000}
n=${2:-5000}
command -v valgrind >/dev/null || { echo "bench-instructions: valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
mkdir -p "$root/bin" "$root/docs/bench"
(cd "$root/bench" && go build -o "$root/bin/idembench" ./cmd/idembench)
bench=$root/bin/idembench
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

port_open() { (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# count TARGET MODE → instructions per request
count() {
	local target=$1 mode=$2 port vp f total
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
	GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 valgrind --tool=callgrind --callgrind-out-file="$work/cg.$target.$mode.%p" \
		"$bench" serve-target --listen "127.0.0.1:$port" --target "$target" >"$work/valgrind.log" 2>&1 &
	vp=$!
	for _ in $(seq 300); do port_open "$port" && break; sleep 0.2; done
	port_open "$port" || { echo "bench-instructions: $target did not start" >&2; cat "$work/valgrind.log" >&2; exit 1; }
	"$bench" load --url "http://127.0.0.1:$port/" --mode "$mode" --clients 1 --requests "$warm" --duration 10m >/dev/null
	callgrind_control -z "$vp" >/dev/null
	"$bench" load --url "http://127.0.0.1:$port/" --mode "$mode" --clients 1 --requests "$n" --duration 10m >"$work/load.txt"
	callgrind_control -d "$vp" >/dev/null
	sleep 1
	kill -9 "$vp" 2>/dev/null || true
	wait "$vp" 2>/dev/null || true
	f=$(ls "$work"/cg."$target"."$mode".*.1)
	total=$(sed -n 's/^summary: //p; s/^totals: //p' "$f" | head -1 | awk '{print $1}')
	echo $((total / n))
}

declare -A ins
for mode in newkey replay; do
	for target in nethttp nethttp-idem fiber fiber-idem; do
		echo "bench-instructions: $target $mode" >&2
		ins[$target.$mode]=$(count "$target" "$mode")
	done
done

pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.0f%%", (b - a) * 100 / a }'; }
{
	echo "# Instructions per request (callgrind)"
	echo
	echo "Measured $(date -u +'%Y-%m-%d %H:%M UTC') at commit $(git -C "$root" rev-parse --short HEAD), $(go version | cut -d' ' -f3), valgrind $(valgrind --version | sed 's/valgrind-//')."
	echo
	echo "Command: \`scripts/bench-instructions.sh $warm $n\`"
	echo
	echo "Each server alone under callgrind (GOMAXPROCS=1): $warm requests to warm it, then $n counted, from one"
	echo "keep-alive client of the in-repo load generator, one request at a time (a new key per request, or"
	echo "one key replayed). Instructions are the server process's, all threads (garbage collector included),"
	echo "divided by the counted requests. They do not depend on the machine's load; they leave out cache"
	echo "misses and stalls, and valgrind hides SHA-NI, so idemhttp's SHA-256 fingerprint is counted as"
	echo "its AVX2 code (about 4,400 instructions for a small request; fewer cycles on the real CPU)."
	echo
	echo "| path | server | bare | with middleware | added | added vs bare |"
	echo "| --- | --- | ---: | ---: | ---: | ---: |"
	for mode in newkey replay; do
		for pair in "nethttp nethttp-idem net/http + idemhttp" "fiber fiber-idem Fiber + idempotency"; do
			set -- $pair
			a=${ins[$1.$mode]} b=${ins[$2.$mode]}
			shift 2
			echo "| $mode | $* | $a | $b | $((b - a)) | $(pct "$a" "$b") |"
		done
	done
} >"$root/docs/bench/instructions.md"
cat "$root/docs/bench/instructions.md"
