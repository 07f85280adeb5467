#!/usr/bin/env bash
# Checks `make dist`: two builds of the commit at HEAD, each from its own clean clone at its
# own path, give byte-identical archives, SBOMs and SHA256SUMS; the checksums verify; every
# platform has its archive and SBOM; each binary's size is printed, and a linux one must stay
# under 45 MiB (MAX_BINARY bytes: a guard against a dependency that swells it); and the binary
# for this machine names its commit.
# PLATFORMS (as for scripts/dist.sh) narrows both builds and the checks.
set -euo pipefail
cd "$(dirname "$0")/.."
commit=$(git rev-parse HEAD)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for side in a b; do
	git clone -q --no-checkout . "$work/src-$side"
	git -C "$work/src-$side" checkout -q --detach "$commit"
	echo "dist-test: build $side (clone at $work/src-$side)"
	DIST="$work/dist-$side" bash "$work/src-$side/scripts/dist.sh" >/dev/null
done
fail=0
if ! diff -r "$work/dist-a" "$work/dist-b" >/dev/null; then
	echo "dist-test: the two builds differ:" >&2
	(cd "$work/dist-a" && sha256sum -- *) >"$work/a.sum"
	(cd "$work/dist-b" && sha256sum -- *) >"$work/b.sum"
	diff "$work/a.sum" "$work/b.sum" >&2 || true
	fail=1
fi
cd "$work/dist-a"
sha256sum --quiet -c SHA256SUMS
platforms=${PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64}
for p in ${platforms//\//_}; do
	ext=tar.gz
	if [[ $p == windows_* ]]; then
		ext=zip
	fi
	archive=$(ls idem_*_"$p.$ext" 2>/dev/null || true)
	if [ -z "$archive" ]; then
		echo "dist-test: no archive for $p" >&2
		fail=1
		continue
	fi
	grep -q " $archive\$" SHA256SUMS || { echo "dist-test: $archive not in SHA256SUMS" >&2; fail=1; }
	sbom=$archive.cdx.json
	if ! grep -q '"bomFormat": *"CycloneDX"' "$sbom" || ! grep -q 'pkg:golang/github.com/jackc/pgx/v5@' "$sbom"; then
		echo "dist-test: $sbom is not a CycloneDX SBOM listing the linked modules" >&2
		fail=1
	fi
	grep -q " $sbom\$" SHA256SUMS || { echo "dist-test: $sbom not in SHA256SUMS" >&2; fail=1; }
	# The binary's size; the linux ones (the image's) stay under MAX_BINARY bytes.
	if [ "$ext" = zip ]; then
		size=$(unzip -l "$archive" | awk '$4 ~ /\/idem\.exe$/ {print $1}')
	else
		size=$(tar -tvzf "$archive" | awk '$6 ~ /\/idem$/ {print $3}')
	fi
	echo "dist-test: $p binary $size bytes"
	if [[ $p == linux_* ]] && [ "${size:-0}" -ge "${MAX_BINARY:-47185920}" ]; then
		echo "dist-test: the $p binary has $size bytes, not under ${MAX_BINARY:-47185920} (45 MiB)" >&2
		fail=1
	fi
done
# The binary of this machine's platform runs and names the commit.
host=$(go env GOOS)_$(go env GOARCH)
if [ -f idem_*_"$host.tar.gz" ]; then
	mkdir "$work/x"
	tar -xzf idem_*_"$host.tar.gz" -C "$work/x"
	line=$("$work"/x/idem_*/idem version)
	echo "dist-test: $line"
	if [[ $line != *"commit $commit,"* ]]; then
		echo "dist-test: idem version does not name the commit $commit" >&2
		fail=1
	fi
	listing=$(tar -tvzf idem_*_"$host.tar.gz")
	if grep -qv ' 0/0 ' <<<"$listing"; then
		echo "dist-test: archive entries not owned by 0/0:" >&2
		echo "$listing" >&2
		fail=1
	fi
fi
if [ "$fail" != 0 ]; then
	exit 1
fi
ls -l "$work/dist-a"
echo "dist-test: ok, two builds of $commit identical"
