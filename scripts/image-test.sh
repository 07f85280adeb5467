#!/usr/bin/env bash
# Builds the idem image (scripts/image.sh) and runs it as an operator would
# (internal/imagetest): against the local PostgreSQL and an upstream, the README's curl pair,
# /readyz, a SIGTERM drain, the non-root user, `idem version`, SQLite on the /data volume.
set -euo pipefail
cd "$(dirname "$0")/.."
export IMAGE=${IMAGE:-localhost/idem}
bash scripts/image.sh
# shellcheck source=scripts/image-podman.sh
. scripts/image-podman.sh
export IDEM_PODMAN="${PODMAN[*]}"
export IDEM_PODMAN_RUN="${PODMAN_RUN[*]}"
export IDEM_IMAGE=$IMAGE:latest
export IDEM_IMAGE_COMMIT
IDEM_IMAGE_COMMIT=$(git rev-parse HEAD)
go test -count=1 -v -timeout 10m ./internal/imagetest/
