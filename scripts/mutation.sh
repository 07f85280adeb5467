#!/usr/bin/env bash
# Mutation testing (gremlins) of the engine, idemhttp, memstore, the SQL stores' shared
# transaction mode (store/internal/txmode) and sqlitestore's known-keys table (hint.go), then
# of the gateway, the consumer core, idemlambda, idemgrpc, the console and the SQL stores'
# transaction runners: `make mutation`. One area alone: MUTATION_TARGETS (below).
#
# gremlins measures coverage with `go test ./...` under the path it is given ("." is the whole
# module) and gives each mutant a time limit of that run times a coefficient. So each package
# is mutated in a copy of the working tree that keeps only that package, the packages its
# tests import, and that package's tests: the coverage run is short, and so is the limit of a
# mutant that hangs. Reports (one line per mutant, and gremlins' JSON) go to tmp/mutation/.
#
# Each target is name:package:timeout-coefficient:files-to-skip (a regexp on paths), and
# optionally :more-packages (comma-separated) whose code the copy keeps as well, for tests that
# build a command rather than import it (the gateway's end-to-end tests build ./cmd/idem, the
# mutated binary). The coefficient leaves room for the rebuild each mutant needs. idemhttp skips its JSON
# canonicalizer and key parser (fuzzed against encoding/json and the RFC grammar: make fuzz)
# and its option, problem and budget tables, to keep the run near half an hour on 2 cores.
#
# To measure part of a package, set MUTATION_TARGETS with a wider skip pattern, e.g. only
# idemhttp's middleware.go and scope.go:
#   MUTATION_TARGETS='idemhttp-mw:./idemhttp:3:(canonjson|key|options|problem|budget|capture|fingerprint)[.]go$' make mutation
# MUTATION_FLAGS passes more flags to gremlins (-d lists the mutants without running them).
# MUTATION_SKIP_TESTS is a regexp of tests not to run (go test -skip), for the coverage run and
# every mutant: e.g. '^TestBinary' runs the gateway's in-process tests without its end-to-end
# ones. gremlins counts a mutant as covered only when a test of the package's own process
# reaches it, so the end-to-end tests (which run the binary) never make a mutant covered; they
# can only kill one the in-process tests reach.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
GREMLINS=${GREMLINS:-github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0}
WORKERS=${MUTATION_WORKERS:-2}
CORE="engine:.:15:^store/ idemhttp:./idemhttp:3:(canonjson|key|options|problem|budget)[.]go$ memstore:./store/memstore:30:^$ txmode:./store/internal/txmode:15:^$ sqlhint:./store/sqlitestore:3:(bench|deadline|doc|dotx|list|migrate|queries|sqlitestore|sweeper|txrunner|records)[.]go$"
# The faces and the SQL transaction runners: the gateway's proxy, routing and request path
# (its tests include the end-to-end ones, which build the mutated binary), the consumer core,
# idemlambda, idemgrpc, the console, and each SQL store's DoTx and TxRunner.
FACES="gateway:./gateway:5:(config|metrics|otlp|storewait)[.]go$:./cmd/idem consumer:./consumer:5:(consumertest|internal)/ idemlambda:./idemlambda:5:^$ idemgrpc:./idemgrpc:5:^$ console:./internal/console:5:^$ pgtx:./store/pgstore:3:(doc|group|list|migrate|partition|partition_migrate|pgstore|queries|sweeper)[.]go$ mysqltx:./store/mysqlstore:3:(doc|list|migrate|mysqlstore|queries|sweeper)[.]go$ sqlitetx:./store/sqlitestore:3:(doc|hint|list|migrate|queries|records|sqlitestore|sweeper)[.]go$"
TARGETS=${MUTATION_TARGETS:-"$CORE $FACES"}
module=$($GO list -m)
out=$PWD/tmp/mutation
mkdir -p "$out"

# leanCopy copies the tracked files of the working tree to $1, then drops every package that
# $2's tests (and the packages in $3, comma-separated) do not need, and every test file
# outside $2.
leanCopy() {
	local dir=$1 pkg=$2 more=${3:-}
	git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$dir"
	local keep
	# shellcheck disable=SC2086 # more is a list of packages
	keep=$(cd "$dir" && $GO list -deps -test "$pkg" ${more//,/ } | sed -n "s#^$module\(/[^ ]*\)\{0,1\}\( .*\)\{0,1\}\$#.\1#p" | grep -v '\.test$' | sort -u)
	local want
	want=$(cd "$dir" && $GO list -f '{{.Dir}}' "$pkg")
	want=.${want#"$dir"}
	(cd "$dir" && find . -name '*.go' -printf '%h\n' | sort -u) | while read -r d; do
		if ! grep -qx -- "$d" <<<"$keep"; then
			find "$dir/$d" -maxdepth 1 -name '*.go' -delete
		elif [ "$d" != "$want" ]; then
			find "$dir/$d" -maxdepth 1 -name '*_test.go' -delete
		fi
	done
}

for t in $TARGETS; do
	IFS=: read -r name pkg coef skip more <<<"$t"
	echo "== $name ($pkg)"
	dir=$(mktemp -d)
	leanCopy "$dir" "$pkg" "$more"
	(cd "$dir" && GOFLAGS="${GOFLAGS:-}${MUTATION_SKIP_TESTS:+ -skip=$MUTATION_SKIP_TESTS}" $GO run "$GREMLINS" unleash --workers "$WORKERS" --timeout-coefficient "$coef" \
		-E "$skip" -o "$out/$name.json" ${MUTATION_FLAGS:-} "$pkg") | tee "$out/$name.txt" | grep -v '^ *KILLED' || true
	rm -rf "$dir"
done
