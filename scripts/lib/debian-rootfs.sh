# shellcheck shell=bash
# Builds a minimal Debian tree from Debian's own packages: what scripts/build-docker-image.sh
# (the Docker backend's image) and scripts/build-rootfs.sh (the chroot newer brokers run from)
# share. Sourced, never run. The caller sets ROOTFS_TAG (the prefix of every message) and
# defines fail MESSAGE (prints it and exits non-zero).
#
#   rootfs_bootstrap ROOT SUITE MIRROR LOGBASE PKG...   debootstrap minbase + apt-get install
#   rootfs_unmount ROOT                                 unmount whatever is mounted under ROOT
#   rootfs_apt_mirror                                   the Debian mirror this host's apt uses

# Runs a command with its output into a log, removed when it succeeds. On failure shows the
# log's last lines (the command's own error) and fails with WHAT and the command's exit status.
rootfs_logged() {
  local log=$1 what=$2 rc=0
  shift 2
  "$@" >"$log" 2>&1 || rc=$?
  if [ "$rc" != 0 ]; then
    tail -20 "$log" >&2
    fail "$what failed (exit $rc; log: $log)"
  fi
  rm -f "$log"
}

# Takes the tree, suite, mirror, a prefix for log files ($LOGBASE.debootstrap.log,
# $LOGBASE.apt.log) and the packages to add. Debootstraps a minbase SUITE into ROOT, then
# installs the packages inside it with no recommends, no service started (policy-rc.d) and
# /proc mounted only while apt runs; trims apt lists, docs and man pages. Fails on any step.
rootfs_bootstrap() {
  local root=$1 suite=$2 mirror=$3 logbase=$4
  shift 4
  echo "$ROOTFS_TAG: debootstrap $suite (minbase) from $mirror"
  rootfs_logged "$logbase.debootstrap.log" debootstrap \
    debootstrap --variant=minbase "$suite" "$root" "$mirror"

  # A suite whose Release file the mirror serves past its Valid-Until date (Debian testing and
  # unstable here) is read anyway when the recipe says so (ROOTFS_CHECK_VALID_UNTIL=false):
  # apt inside the tree refuses it otherwise. The setting stays in the tree for later apt runs.
  if [ "${ROOTFS_CHECK_VALID_UNTIL:-true}" = false ]; then
    mkdir -p "$root/etc/apt/apt.conf.d"
    echo 'Acquire::Check-Valid-Until "false";' >"$root/etc/apt/apt.conf.d/99rmqh-valid-until"
  fi
  # No service may start inside the chroot while packages install.
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod +x "$root/usr/sbin/policy-rc.d"
  mount -t proc proc "$root/proc"
  echo "$ROOTFS_TAG: installing $*"
  rootfs_logged "$logbase.apt.log" "apt-get update in the chroot" \
    chroot "$root" env DEBIAN_FRONTEND=noninteractive LC_ALL=C apt-get update -qq
  rootfs_logged "$logbase.apt.log" "apt-get install in the chroot" \
    chroot "$root" env DEBIAN_FRONTEND=noninteractive LC_ALL=C \
    apt-get install -y -qq --no-install-recommends "$@"
  chroot "$root" apt-get clean
  umount "$root/proc"
  rm -f "$root/usr/sbin/policy-rc.d"
  rm -rf "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* "$root"/usr/share/man/* \
         "$root"/var/cache/apt/*.bin "$root"/tmp/*
}

# Takes a tree. Unmounts everything mounted at or under it, deepest first (lazily, so a busy
# mount cannot keep it), so that removing the tree can never reach into /proc or /dev.
rootfs_unmount() {
  local root m
  root=$(realpath -m "$1")
  # mountinfo's 5th field is the mount point, with spaces escaped as \040.
  awk -v r="$root" '$5 == r || index($5, r "/") == 1 { print $5 }' /proc/self/mountinfo \
    | sort -r | while read -r m; do umount -l "$m" || true; done
}

# Prints the main Debian archive URI this host's apt reads (deb822 sources first, then
# sources.list), not the security archive; deb.debian.org when none is found.
rootfs_apt_mirror() {
  local uri=
  if [ -r /etc/apt/sources.list.d/debian.sources ]; then
    uri=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/) { print $i; exit } }' \
      /etc/apt/sources.list.d/debian.sources)
  fi
  if [ -z "$uri" ] && [ -r /etc/apt/sources.list ]; then
    uri=$(awk '$1 == "deb" && $2 !~ /^\[/ && $2 !~ /security/ { print $2; exit }' \
      /etc/apt/sources.list)
  fi
  echo "${uri:-http://deb.debian.org/debian}"
}
