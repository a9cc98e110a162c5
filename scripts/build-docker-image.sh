#!/usr/bin/env bash
# Builds the Docker backend's broker image from Debian's own packages, without pulling anything:
# debootstrap a minimal bookworm, install rabbitmq-server iptables iproute2 procps in it (chroot,
# from the Debian mirror), and `docker import` the tree as IMAGE. Idempotent: an image already
# present is left alone (FORCE=1 rebuilds). Needs root, debootstrap and a running Docker daemon.
#
#   scripts/build-docker-image.sh [IMAGE]        default rmqh/rabbitmq:3.10-local
#   scripts/build-docker-image.sh --rabbitmq 4.0 [IMAGE]
#                                 default rmqh/rabbitmq:4.0-local: imports the release's Debian
#                                 root filesystem (scripts/build-rootfs.sh, built when missing)
#
# Exit 0 built or present, 2 when a prerequisite is missing or a step failed.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib/debian-rootfs.sh"
ROOTFS_TAG=build-docker-image

RELEASE=
if [ "${1:-}" = --rabbitmq ]; then
  RELEASE=${2:?--rabbitmq needs a release line, e.g. 4.0}
  shift 2
fi
IMAGE=${1:-${RMQH_DOCKER_IMAGE:-rmqh/rabbitmq:${RELEASE:-3.10}-local}}
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
WORK=${WORK:-/var/tmp/rmqh.image-build}
PKGS=(rabbitmq-server iptables iproute2 procps coreutils util-linux)
# Prefer Debian's docker client (it matches Debian's daemon); any client on PATH will do.
DOCKER=$(command -v /usr/bin/docker || command -v docker || true)

fail() { echo "build-docker-image: $*" >&2; exit 2; }

[ "$(id -u)" = 0 ] || fail "needs root (debootstrap, chroot)"
[ -n "$DOCKER" ] || fail "no docker client (apt-get install docker.io)"
"$DOCKER" version --format '{{.Server.Version}}' >/dev/null 2>&1 \
  || fail "the Docker daemon is not running (start dockerd; see README, Backends)"
if [ "${FORCE:-0}" != 1 ] && "$DOCKER" image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "build-docker-image: $IMAGE is present; nothing to do (FORCE=1 rebuilds)"
  exit 0
fi
command -v debootstrap >/dev/null || fail "no debootstrap (apt-get install debootstrap)"

start=$(date +%s)
import_tree() {  # import_tree DIR VERSION: the tree as IMAGE, its broker idling until exec'd
  echo "build-docker-image: importing as $IMAGE (rabbitmq-server $2)"
  tar --numeric-owner --exclude=./proc/* --exclude=./work -C "$1" -c . | "$DOCKER" import \
    --change 'CMD ["sleep", "infinity"]' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change "LABEL rmqh.image=1 rmqh.rabbitmq-version=$2" \
    - "$IMAGE" >/dev/null
}
if [ -n "$RELEASE" ]; then
  # A release from its own root filesystem: built (or found) once, shared with the local backend.
  here=$(dirname "${BASH_SOURCE[0]}")
  bash "$here/build-rootfs.sh" "$RELEASE" || fail "the RabbitMQ $RELEASE root filesystem failed"
  tree=$(bash "$here/build-rootfs.sh" --path "$RELEASE")
  version=$(sed -n 's/^rabbitmq-server=//p' "$tree/.rmqh-rootfs")
  import_tree "$tree" "$version"
  echo "build-docker-image: built $IMAGE in $(( $(date +%s) - start )) s"
  exit 0
fi
root="$WORK/rootfs"
cleanup() {
  # Whatever happens, unmount what we mounted inside the tree, then drop the tree.
  rootfs_unmount "$root"
  rm -rf "$WORK"
}
trap cleanup EXIT
rm -rf "$WORK"
mkdir -p "$WORK"

rootfs_bootstrap "$root" "$SUITE" "$MIRROR" "$WORK" "${PKGS[@]}"
# The broker is started by the harness (through `docker exec`); the container only idles.
version=$(chroot "$root" dpkg-query -W -f='${Version}' rabbitmq-server)

import_tree "$root" "$version"
rm -f "$WORK.debootstrap.log" "$WORK.apt.log"
echo "build-docker-image: built $IMAGE in $(( $(date +%s) - start )) s"
