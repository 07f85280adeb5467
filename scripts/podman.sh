#!/usr/bin/env bash
# Installs Debian's podman with the runc runtime, unless podman is already there: quick when
# present. `make image` and `make image-test` run it first.
set -euo pipefail
if command -v podman >/dev/null && command -v runc >/dev/null; then
	exit 0
fi
if ! command -v apt-get >/dev/null; then
	echo "podman: not installed, and no apt-get to install it" >&2
	exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
	sudo="sudo"
fi
echo "podman: installing Debian's podman and runc" >&2
export DEBIAN_FRONTEND=noninteractive
pkgs=(podman runc)
# Wait for another apt run to finish rather than failing on its lock.
$sudo apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "${pkgs[@]}" >/dev/null ||
	{ $sudo apt-get -o DPkg::Lock::Timeout=300 update >/dev/null &&
		$sudo apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "${pkgs[@]}" >/dev/null; }
command -v podman >/dev/null && command -v runc >/dev/null
