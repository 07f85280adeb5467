#!/usr/bin/env bash
# A private PostgreSQL for benchmarks that need server settings the shared service does not
# have (shared_buffers sized for the table, longer checkpoints), started on a free loopback
# port in its own directory. Source it, then:
#   url=$(pg_private_start DIR SHARED_BUFFERS)   # e.g. pg_private_start /tmp/x 6GB
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

# pg_private_start DIR SHARED_BUFFERS: initdb in DIR, start, print the URL.
pg_private_start() {
	local dir=$1 buffers=$2 bin port
	bin=$(pg_private_bin) || return 1
	port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	mkdir -p "$dir"
	# As root, the postgres user must be able to reach DIR: mktemp's directories are 0700.
	[ "$(id -u)" = 0 ] && { chown postgres: "$dir"; chmod o+x "$(dirname "$dir")"; }
	pg_private_as "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 ||
		{ cat "$dir/initdb.log" >&2; return 1; }
	pg_private_as "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -o "-p $port -k $dir \
-c listen_addresses=127.0.0.1 -c max_connections=100 -c shared_buffers=$buffers \
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
