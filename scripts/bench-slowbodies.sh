#!/usr/bin/env bash
# Memory per slow connection that declares the largest body: idemhttp against a bare net/http
# server, in the same run (BenchmarkSlowBodies in idemhttp/slowbody_bench_test.go). Writes
# docs/bench/slowbodies.md. Takes about 30 seconds.
#
# usage: scripts/bench-slowbodies.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mkdir -p docs/bench
cmd="go test -run '^\$' -bench SlowBodies -benchtime 1x ./idemhttp/"
load=$(cut -d' ' -f1-3 /proc/loadavg)
out=$(go test -run '^$' -bench SlowBodies -benchtime 1x ./idemhttp/ 2>&1) || { echo "$out" >&2; exit 1; }
line=$(echo "$out" | grep '^BenchmarkSlowBodies')
metric() { echo "$line" | awk -v m="$1" '{ for (i = 2; i <= NF; i++) if ($i == m) { print $(i - 1); exit } }'; }
bare=$(metric bare-KiB/conn)
mw=$(metric mw-KiB/conn)
{
	echo "# Slow bodies: memory per connection that declares the largest body"
	echo
	echo "Measured $(date -u +'%Y-%m-%d %H:%M UTC') at commit $(git rev-parse --short HEAD), load average $load at the start."
	echo "Command: \`$cmd\` (\`scripts/bench-slowbodies.sh\`)."
	echo
	echo "2,000 connections each declare a body of 1 MiB (the default Options.MaxRequestBody) and send one"
	echo "byte, then wait; a second wave does the same once the first is gone. The server is a child"
	echo "process: a bare net/http server whose handler reads the body (the baseline), or the same server"
	echo "behind idemhttp (memstore, default options: a 64 MiB memory budget). Its resident memory"
	echo "(VmRSS) is read before and while the second wave waits; phases alternate, two rounds."
	echo
	echo "| | KiB per connection |"
	echo "| --- | --- |"
	echo "| bare net/http | $bare |"
	echo "| net/http + idemhttp | $mw |"
	echo "| ratio idemhttp ÷ bare | $(awk -v a="$mw" -v b="$bare" 'BEGIN { printf "%.2f", a / b }') |"
	echo "| added by idemhttp | $(metric mw-added-KiB/conn) |"
	echo
	echo "A request holds what has arrived of its body, in a buffer that starts at 4 KiB and doubles as"
	echo "bytes come, plus a 4 KiB response buffer: about 8 KiB while it waits, whatever length it declared."
	echo "A buffer sized from the declared Content-Length would hold 1 MiB per connection, 2 GiB for"
	echo "2,000 connections (\`TestSlowBodiesHoldOnlyWhatArrived\` and \`TestBinarySlowBodiesMemory\` fail"
	echo "when that is planted). Past the memory budget, requests get 503 with Retry-After instead of memory."
	echo "The kept figures are resident memory the Go runtime has not yet returned to the system 3 s after"
	echo "the connections closed; the bare server keeps as much, in proportion."
	echo
	echo '```'
	echo "$out" | grep -E '^(Benchmark|    slowbody)'
	echo '```'
} >docs/bench/slowbodies.md
echo "bench-slowbodies: wrote docs/bench/slowbodies.md" >&2
