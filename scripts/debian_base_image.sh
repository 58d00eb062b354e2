#!/bin/bash
# debian_base_image.sh [IMAGE] : build a Debian bookworm base image with python3 and python3-venv
# from Debian's packages (debootstrap; no image registry needed) and import it into podman as
# IMAGE (default localhost/debian-base:bookworm). Reuses IMAGE when podman already has it.
# One build at a time on the machine (a lock). Needs root, debootstrap and podman.
set -euo pipefail
image=${1:-localhost/debian-base:bookworm}
here=$(cd "$(dirname "$0")" && pwd)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/podman.conf}
exec 9>/tmp/workbench-debian-base.lock
flock 9
if podman image exists "$image"; then
    echo "base image $image: present, reused"
    exit 0
fi
rootfs=$(mktemp -d /tmp/workbench-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "==> debootstrap bookworm (minbase, python3, python3-venv) into $rootfs"
debootstrap --variant=minbase --include=python3,python3-venv bookworm "$rootfs" http://deb.debian.org/debian >/dev/null
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" -c . | podman import --change 'CMD ["/bin/bash"]' - "$image" >/dev/null
echo "base image $image: built"
