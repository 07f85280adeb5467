#!/usr/bin/env bash
# Starts every service the tests need that is not already up, then returns.
# Idempotent and quick when all is up. Each part lives in scripts/services.d/*.sh and is
# sourced in name order; each part checks before it starts anything and binds to 127.0.0.1.
# State (downloads, logs, pid files) goes to .services/ at the repository root.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export IDEM_SERVICES_DIR="$root/.services"
mkdir -p "$IDEM_SERVICES_DIR"

# port_open PORT: true if something listens on 127.0.0.1:PORT.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# wait_port PORT SECONDS NAME: waits for a port to open, fails loudly if it does not.
wait_port() {
	local port=$1 secs=$2 name=$3 i
	for ((i = 0; i < secs * 10; i++)); do
		port_open "$port" && return 0
		sleep 0.1
	done
	echo "services: $name did not open 127.0.0.1:$port within ${secs}s" >&2
	return 1
}

for part in "$root"/scripts/services.d/*.sh; do
	[ -e "$part" ] || continue
	# shellcheck source=/dev/null
	source "$part"
done
echo "services: all up"
