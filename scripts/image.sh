#!/usr/bin/env bash
# Builds the idem container image with podman, without a Docker daemon and without pulling
# anything: the static binary is built here (CGO off, -trimpath, symbols dropped, version and
# commit stamped), staged with the host's CA certificates, Go's time zone database and a
# passwd entry for the numeric user, and `podman build` turns Containerfile (FROM scratch)
# into the image.
#
#   IMAGE  image name (default localhost/idem); tagged :latest and :<version>
#   GOARCH architecture of the binary and image (default: the host's)
#   BINARY a static linux idem built elsewhere to package instead (the one from a release
#          archive, say); its version labels come from this checkout
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/podman.sh
# shellcheck source=scripts/image-podman.sh
. scripts/image-podman.sh
IMAGE=${IMAGE:-localhost/idem}
GOARCH=${GOARCH:-$(go env GOARCH)}
ldflags=$(bash scripts/dist-ldflags.sh)
version=$(sed -n 's/.*cli\.Version=\([^ ]*\).*/\1/p' <<<"$ldflags")
commit=$(sed -n 's/.*cli\.Commit=\([^ ]*\).*/\1/p' <<<"$ldflags")
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
root=$ctx/rootfs
mkdir -p "$root/usr/local/bin" "$root/etc/ssl/certs" "$root/usr/share" "$root/tmp" "$ctx/data"
chmod 1777 "$root/tmp"
if [ -n "${BINARY:-}" ]; then
	cp "$BINARY" "$root/usr/local/bin/idem"
	chmod 0755 "$root/usr/local/bin/idem"
else
	CGO_ENABLED=0 GOOS=linux GOARCH=$GOARCH go build -trimpath -ldflags "$ldflags" \
		-o "$root/usr/local/bin/idem" ./cmd/idem
fi
certs=${IDEM_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
if [ ! -s "$certs" ]; then
	echo "image: no CA bundle at $certs (install ca-certificates or set IDEM_CA_BUNDLE)" >&2
	exit 1
fi
cp "$certs" "$root/etc/ssl/certs/ca-certificates.crt"
# Go's own copy of the IANA database, one file; ZONEINFO in the Containerfile points at it.
cp "$(go env GOROOT)/lib/time/zoneinfo.zip" "$root/usr/share/zoneinfo.zip"
printf 'root:x:0:0:root:/:/sbin/nologin\nidem:x:65532:65532:idem:/data:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nidem:x:65532:\n' >"$root/etc/group"
"${PODMAN[@]}" build --pull=never --arch "$GOARCH" --os linux -f Containerfile \
	--label org.opencontainers.image.title=idem \
	--label org.opencontainers.image.version="$version" \
	--label org.opencontainers.image.revision="$commit" \
	-t "$IMAGE:latest" -t "$IMAGE:${version//+/-}" "$ctx"
size=$("${PODMAN[@]}" image inspect --format '{{.Size}}' "$IMAGE:latest")
echo "image: $IMAGE:latest ($IMAGE:${version//+/-}), $size bytes"
