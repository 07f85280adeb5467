#!/usr/bin/env bash
# Prints the -ldflags value for a release build of idem: symbol tables and DWARF dropped
# (-s -w), and the version, commit and commit time stamped into internal/cli, so that
# `idem version` names them also where go build records no version control information
# (GOFLAGS=-buildvcs=false, a tree without .git, a linked worktree).
#
#   go build -trimpath -ldflags "$(scripts/dist-ldflags.sh)" ./cmd/idem
#
# VERSION, COMMIT and COMMIT_TIME in the environment override what git says.
set -euo pipefail
cd "$(dirname "$0")/.."
pkg=github.com/idemkit/idem/internal/cli
dirty=""
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
	dirty="+dirty"
fi
if [ -z "${VERSION:-}" ]; then
	# A tagged commit gives its tag (v1.2.3); otherwise the nearest tag, the commits since and
	# the abbreviated commit (v1.2.3-4-g1cee407e2d6a); with no tag at all, devel-<commit>.
	if VERSION=$(git describe --tags --abbrev=12 2>/dev/null); then
		:
	else
		VERSION="devel-$(git rev-parse --short=12 HEAD)"
	fi
	VERSION="$VERSION$dirty"
fi
COMMIT=${COMMIT:-$(git rev-parse HEAD)$dirty}
COMMIT_TIME=${COMMIT_TIME:-$(TZ=UTC git log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd)}
printf -- '-s -w -X %s.Version=%s -X %s.Commit=%s -X %s.CommitTime=%s\n' \
	"$pkg" "$VERSION" "$pkg" "$COMMIT" "$pkg" "$COMMIT_TIME"
