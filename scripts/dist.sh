#!/usr/bin/env bash
# Builds the release archives of idem into DIST (default dist/): for linux, darwin and windows
# on amd64 and arm64, a static binary (CGO off, -trimpath, symbols dropped, version and commit
# stamped) with LICENSE and README.md, as idem_<version>_<os>_<arch>.tar.gz (.zip for
# windows); beside each archive its CycloneDX SBOM (<archive>.cdx.json, the modules linked
# into that platform's binary); and SHA256SUMS over all of them.
#
# It builds the commit at HEAD from a fresh clone, so uncommitted changes are not in the
# archives, and the SBOM tool can read the main module's version from git.
#
# Reproducible: the same commit and Go version give byte-identical files (sorted names, the
# commit's time as every mtime, owner 0, fixed modes, gzip without name or time, zip without
# extra fields, SBOMs without serial number or timestamp). `make dist-test` checks it.
set -euo pipefail
cd "$(dirname "$0")/.."
DIST=${DIST:-dist}
mkdir -p "$DIST"
DIST=$(cd "$DIST" && pwd)
PLATFORMS=${PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64}
CYCLONEDX=${CYCLONEDX:-github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
commit=$(git rev-parse HEAD)
git clone -q --no-checkout . "$work/src"
git -C "$work/src" checkout -q --detach "$commit"
cd "$work/src"
ldflags=$(bash scripts/dist-ldflags.sh)
version=$(sed -n 's/.*cli\.Version=\([^ ]*\).*/\1/p' <<<"$ldflags")
# Every mtime in the archives: the commit's time (SOURCE_DATE_EPOCH if set).
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
export SOURCE_DATE_EPOCH=$epoch
find "$DIST" -mindepth 1 -delete
# The SBOM tool, built once from the module proxy at a pinned version (not a dependency of idem).
GOBIN="$work/bin" go install "$CYCLONEDX"
for platform in $PLATFORMS; do
	os=${platform%/*}
	arch=${platform#*/}
	name=idem_${version}_${os}_${arch}
	dir=$work/$name
	mkdir -p "$dir"
	exe=idem
	if [ "$os" = windows ]; then
		exe=idem.exe
	fi
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -buildvcs=false -ldflags "$ldflags" \
		-o "$dir/$exe" ./cmd/idem
	cp LICENSE README.md "$dir/"
	chmod 0755 "$dir/$exe"
	chmod 0644 "$dir/LICENSE" "$dir/README.md"
	chmod 0755 "$dir"
	find "$dir" -exec touch -h -d "@$epoch" {} +
	if [ "$os" = windows ]; then
		archive=$name.zip
		# -X: no uid/gid or extended-time fields; -D: no directory entries; names sorted.
		(cd "$work" && find "$name" -type f | LC_ALL=C sort |
			TZ=UTC zip -q -X -D "$DIST/$archive" -@)
	else
		archive=$name.tar.gz
		(cd "$work" && tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
			--format=ustar -cf - "$name" | gzip -n -9 >"$DIST/$archive")
	fi
	# The SBOM of this platform's binary: the modules its packages link, per GOOS/GOARCH.
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$work/bin/cyclonedx-gomod" app -json -notimestamp -noserial \
		-licenses=false -main cmd/idem -output "$DIST/$archive.cdx.json" . 2>/dev/null
	echo "dist: $DIST/$archive"
done
(cd "$DIST" && LC_ALL=C ls | grep -v '^SHA256SUMS$' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
echo "dist: $DIST/SHA256SUMS"
