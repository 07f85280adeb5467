#!/usr/bin/env bash
# Installs what the deployment tests run besides Go, if missing: promtool (from Debian's
# prometheus package, extracted into .tools/bin, so that no Prometheus server is installed or
# started) and systemd-analyze (Debian's systemd package). Idempotent; quick when present.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/.tools/bin"
mkdir -p "$bin"
export PATH="$bin:$PATH"
updated=
apt_update() { [ -n "$updated" ] || { apt-get update -qq; updated=1; }; }

if ! command -v promtool >/dev/null; then
	apt_update
	tmp=$(mktemp -d) && chmod 755 "$tmp"
	(cd "$tmp" && apt-get download -qq prometheus)
	dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
	install -m 0755 "$tmp/x/usr/bin/promtool" "$bin/promtool"
	rm -rf "$tmp"
fi
if ! command -v systemd-analyze >/dev/null; then
	apt_update
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null
fi
promtool --version 2>&1 | head -1
systemd-analyze --version | head -1
