# Sourced by scripts/image*.sh: the podman command lines that work on a host like the CI
# machine (cgroup v1, no systemd, a hard open-files limit of 20000, no registry to pull from).
#
#   "${PODMAN[@]}" build ...      "${PODMAN[@]}" run "${PODMAN_RUN[@]}" IMAGE ...
#
# PODMAN: --runtime runc (Debian's podman prefers crun where it is installed) and
#   --cgroup-manager cgroupfs (no systemd to ask for a scope). IDEM_PODMAN_FLAGS adds global
#   flags, such as --storage-driver vfs where overlay does not mount.
# PODMAN_RUN: explicit ulimits, because podman asks runc for its own defaults (1048576 open
#   files), above what an unprivileged nested host allows ("error setting rlimit type 7:
#   operation not permitted"); the open-files limit is the host's hard limit, at most 65536.
#   --network host: the container reaches services on the host's 127.0.0.1, and its ports
#   are the host's.
# shellcheck shell=bash
# shellcheck disable=SC2206 # IDEM_PODMAN_FLAGS is split into words on purpose
PODMAN=(podman --runtime runc --cgroup-manager cgroupfs ${IDEM_PODMAN_FLAGS:-})
nofile=$(ulimit -Hn)
if [ "$nofile" = unlimited ] || [ "$nofile" -gt 65536 ]; then
	nofile=65536
fi
nproc=$(ulimit -Hu)
if [ "$nproc" = unlimited ] || [ "$nproc" -gt 4096 ]; then
	nproc=4096
fi
PODMAN_RUN=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc" --network host)
unset nofile nproc
