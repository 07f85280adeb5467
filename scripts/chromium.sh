#!/usr/bin/env bash
# Installs Debian's chromium for the console's browser test (internal/console), unless it is
# already there: quick when present. The test finds it at /usr/bin/chromium, or at the path
# in IDEM_CHROMIUM.
set -euo pipefail
if [ -x "${IDEM_CHROMIUM:-/usr/bin/chromium}" ]; then
	exit 0
fi
if ! command -v apt-get >/dev/null; then
	echo "chromium: not installed, and no apt-get to install it; the console's browser test will skip" >&2
	exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
	sudo="sudo"
fi
echo "chromium: installing Debian's chromium" >&2
export DEBIAN_FRONTEND=noninteractive
# Wait for another apt run to finish rather than failing on its lock.
$sudo apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends chromium >/dev/null ||
	{ $sudo apt-get -o DPkg::Lock::Timeout=300 update >/dev/null &&
		$sudo apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends chromium >/dev/null; }
test -x /usr/bin/chromium
