#!/usr/bin/env bash
# A private PostgreSQL for benchmarks that need server settings the shared service does not
# have (shared_buffers sized for the table, longer checkpoints), started on a free loopback
# port in its own directory. Source it, then:
#   url=$(pg_private_start DIR SHARED_BUFFERS [HUGE_PAGES])   # e.g. pg_private_start /tmp/x 6GB on
#   ...
#   pg_private_stop DIR
# Running as root, the server runs as the postgres user (PostgreSQL refuses root).

pg_private_as() {
	if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_private_bin() {
	local bins
	bins=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
	[ -n "$bins" ] || { echo "pg-private: no PostgreSQL under /usr/lib/postgresql/*/bin" >&2; return 1; }
	echo "$bins"
}

# pg_private_start DIR SHARED_BUFFERS [HUGE_PAGES]: initdb in DIR, start with PostgreSQL's
# huge_pages setting (default try), print the URL.
pg_private_start() {
	local dir=$1 buffers=$2 huge=${3:-try} bin port
	bin=$(pg_private_bin) || return 1
	port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	mkdir -p "$dir"
	# As root, the postgres user must be able to reach DIR: mktemp's directories are 0700.
	[ "$(id -u)" = 0 ] && { chown postgres: "$dir"; chmod o+x "$(dirname "$dir")"; }
	pg_private_as "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 ||
		{ cat "$dir/initdb.log" >&2; return 1; }
	pg_private_as "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -o "-p $port -k $dir \
-c listen_addresses=127.0.0.1 -c max_connections=100 -c shared_buffers=$buffers -c huge_pages=$huge \
-c max_wal_size=8GB -c checkpoint_timeout=30min -c wal_compression=on" start >/dev/null ||
		{ cat "$dir/server.log" >&2; return 1; }
	echo "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
}

# pg_private_stop DIR: stop the server and remove DIR.
pg_private_stop() {
	local dir=$1 bin
	bin=$(pg_private_bin) || return 1
	[ -d "$dir/data" ] && pg_private_as "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1
	rm -rf "$dir"
}

# pg_private_huge_pages MB: as root, reserves enough 2 MB huge pages for MB of shared memory
# and prints the previous reservation (to give back with pg_private_huge_pages_restore); prints
# nothing and reserves nothing when that is not possible.
pg_private_huge_pages() {
	local mb=$1 f=/proc/sys/vm/nr_hugepages prev want
	[ "$(id -u)" = 0 ] && [ -w "$f" ] || return 0
	prev=$(cat "$f")
	want=$(( prev + mb / 2 + 128 ))
	echo "$want" >"$f" 2>/dev/null || return 0
	if [ "$(cat "$f")" -lt "$want" ]; then
		echo "$prev" >"$f"
		return 0
	fi
	echo "$prev"
}

# pg_private_huge_pages_restore PREV: gives the huge pages reserved above back.
pg_private_huge_pages_restore() {
	[ -n "$1" ] && echo "$1" >/proc/sys/vm/nr_hugepages 2>/dev/null
	return 0
}
