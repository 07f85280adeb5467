#!/usr/bin/env bash
# Compares pgstore with pgbench running the same statements against the same server, in the
# same session, alternating runs so both see the same load on a shared machine:
#   new key: Reserve (the one-statement claim) + Complete, 16 clients;
#   new key, group commit: the same pgbench script against pgstore with Options.GroupCommit 2
#            (the gateway's default): the same statements, concurrent ones sharing transactions;
#   replay:  Reserve of a completed key (one statement), 16 clients.
# Prints each run and the ratio pgstore ops/s ÷ pgbench TPS (target for the new-key path: >= 0.70).
#
# usage: scripts/bench-pgbench.sh [seconds-per-run (default 10)] [rounds (default 2)]
# env:   IDEM_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test?sslmode=disable)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
url=${IDEM_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
secs=${1:-10}
rounds=${2:-2}
clients=16
work=$(mktemp -d)
trap 'rm -rf "$work"; psql "$url" -qX -c "SET client_min_messages = warning; DROP SCHEMA IF EXISTS idem_pgbench CASCADE" >/dev/null 2>&1 || true' EXIT

# The records table, from the store's own migration.
psql "$url" -qX -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning" -c "DROP SCHEMA IF EXISTS idem_pgbench CASCADE" -c "CREATE SCHEMA idem_pgbench" >/dev/null
sed -e 's/{{table}}/idem_pgbench.records/g' -e 's/{{index}}/records_expires_at/g' \
	"$root"/store/pgstore/migrations/0001_records.sql | psql "$url" -qX -v ON_ERROR_STOP=1 >/dev/null
# 10,000 completed records for the replay path (response: status 201, body {"id":1}).
psql "$url" -qX -v ON_ERROR_STOP=1 -c "INSERT INTO idem_pgbench.records
	SELECT 'r' || i, repeat('a', 64), 2, 1, 1, 1, '\\x0100c901007b226964223a317d'::bytea, 1, 1, 9e15::bigint
	FROM generate_series(1, 10000) AS i" >/dev/null

now="(extract(epoch FROM clock_timestamp()) * 1e6)::bigint"
key="(:r)::text"
# The claim, exactly as pgstore sends it (queries.go), with the parameters filled in by SQL.
reserve=$(cat <<SQL
WITH done AS (
	SELECT false AS claimed, fingerprint, state, token, lease_until, attempts, response, created_at, completed_at, expires_at
	FROM idem_pgbench.records WHERE key = $key AND state = 2 AND expires_at > $now
), up AS (
	INSERT INTO idem_pgbench.records AS r (key, fingerprint, state, token, lease_until, attempts, response, created_at, completed_at, expires_at)
	SELECT $key, repeat('a', 64), 1, $now, $now + 30000000, 1, NULL, $now, 0, $now + 86400000000 WHERE NOT EXISTS (SELECT 1 FROM done)
	ON CONFLICT (key) DO UPDATE SET
		fingerprint = excluded.fingerprint, state = 1, token = GREATEST(r.token + 1, excluded.token),
		lease_until = excluded.lease_until,
		attempts = CASE WHEN r.expires_at <= excluded.created_at THEN 1 ELSE r.attempts + 1 END,
		response = NULL,
		created_at = CASE WHEN r.expires_at <= excluded.created_at THEN excluded.created_at ELSE r.created_at END,
		completed_at = 0, expires_at = excluded.expires_at
	WHERE r.expires_at <= excluded.created_at
	   OR (r.state = 1 AND r.lease_until <= excluded.created_at AND r.fingerprint = excluded.fingerprint)
	RETURNING true AS claimed, fingerprint, state, token, lease_until, attempts, response, created_at, completed_at, expires_at
), cur AS (
	SELECT false AS claimed, fingerprint, state, token, lease_until, attempts, response, created_at, completed_at, expires_at
	FROM idem_pgbench.records WHERE key = $key AND NOT EXISTS (SELECT 1 FROM up) AND NOT EXISTS (SELECT 1 FROM done) FOR SHARE
)
SELECT * FROM done UNION ALL SELECT * FROM up UNION ALL SELECT * FROM cur
SQL
)
# pgbench wants each statement on one line (or with \ continuations): flatten.
flat() { tr '\n\t' '  '; echo; }
{
	echo '\set r random(1, 9000000000000000)'
	printf '%s \\gset\n' "$(echo "$reserve" | flat | sed 's/ *$//')"
	echo "UPDATE idem_pgbench.records SET state = 2, response = '\\x0100c901007b226964223a317d'::bytea, completed_at = $now, expires_at = $now + 86400000000 WHERE key = $key AND token = :token AND state = 1 AND expires_at <> 0;"
} >"$work/newkey.sql"
{
	echo '\set i random(1, 10000)'
	echo "$reserve" | sed "s/(:r)::text/'r' || :i/g" | flat | sed 's/ *$/;/'
} >"$work/replay.sql"


pgbench_tps() { # script
	pgbench -n -M prepared -c "$clients" -j 2 -T "$secs" -f "$1" "$url" 2>&1 |
		awk '/^tps = / { printf "%.0f\n", $3 }'
}
go_ops() { # benchmark name
	(cd "$root" && go test -run '^$' -bench "^$1\$" -benchtime "${secs}s" -count 1 ./store/pgstore/ 2>&1) |
		awk '/ops\/s/ { for (i = 1; i <= NF; i++) if ($(i+1) == "ops/s") { printf "%.0f\n", $i } }'
}

echo "date: $(date -u +%FT%TZ)  server: $(psql "$url" -qAtX -c 'SHOW server_version')  synchronous_commit: $(psql "$url" -qAtX -c 'SHOW synchronous_commit')  cores: $(nproc)"
echo "clients: $clients  seconds per run: $secs  rounds: $rounds"
(cd "$root" && go test -c -o /dev/null ./store/pgstore/) # compile once, outside the timed runs
for kind in newkey newkey-groupcommit replay; do
	case $kind in
	newkey) bench=BenchmarkNewKey script=newkey ;;
	newkey-groupcommit) bench=BenchmarkNewKeyGroupCommit script=newkey ;;
	replay) bench=BenchmarkReplay script=replay ;;
	esac
	sum_pg=0 sum_go=0
	for ((i = 1; i <= rounds; i++)); do
		pg=$(pgbench_tps "$work/$script.sql")
		gov=$(go_ops "$bench")
		[ -n "$pg" ] && [ -n "$gov" ] || { echo "bench-pgbench: a run printed no figure (pgbench '$pg', go '$gov')" >&2; exit 1; }
		echo "$kind round $i: pgbench $pg TPS, pgstore $gov ops/s, ratio $(awk -v a="$gov" -v b="$pg" 'BEGIN { printf "%.2f", a / b }')"
		sum_pg=$((sum_pg + pg)) sum_go=$((sum_go + gov))
	done
	echo "$kind total: pgbench $((sum_pg / rounds)) TPS, pgstore $((sum_go / rounds)) ops/s, ratio $(awk -v a="$sum_go" -v b="$sum_pg" 'BEGIN { printf "%.2f", a / b }')"
done
