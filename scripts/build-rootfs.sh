#!/usr/bin/env bash
# Builds the Debian root filesystem a RabbitMQ release runs from when this host's Debian does
# not ship it (4.0: Debian 13's rabbitmq-server on Erlang 27, whose binaries need Debian 13's C
# library). The local backend enters it with chroot inside each node's network namespace.
#
# The recipe (suite, packages, build number) is scripts/rootfs/rabbitmq-VERSION.recipe; the tree
# goes to $RMQH_ROOTFS_DIR (default .state/rootfs)/rabbitmq-VERSION-HASH, HASH naming the recipe,
# so a changed recipe is a new folder and an unchanged one is never built twice. It is built in
# a hidden temporary folder beside it and renamed into place only when complete, its marker file
# (.rmqh-rootfs: the recipe, hash and installed versions) written last; a failed build removes
# its temporary folder, and the next build removes one a killed build left. The build runs in
# a mount namespace of its own, so no mount (/proc, debootstrap's) outlives it, even killed.
# Packages come from the Debian mirror this host's apt uses (MIRROR overrides); no service
# starts inside the tree (policy-rc.d). Needs root and debootstrap.
#
#   scripts/build-rootfs.sh [VERSION]           build unless present; default 4.0
#   scripts/build-rootfs.sh --path [VERSION]    print where the tree is (or would be) and exit
#
# Exit 0 built or present, 2 when a prerequisite is missing or a step failed (after the failing
# command's own output).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/lib/debian-rootfs.sh"
ROOTFS_TAG=build-rootfs
MARKER=.rmqh-rootfs

fail() { echo "build-rootfs: $*" >&2; exit 2; }

mode=build
case "${1:-}" in
  --path) mode=path; shift ;;
  -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  -*) fail "unknown option $1 (see --help)" ;;
esac
VERSION=${1:-4.0}
NAME="rabbitmq-$VERSION"
RECIPE="$HERE/rootfs/$NAME.recipe"
if [ ! -f "$RECIPE" ]; then
  known=$(cd "$HERE/rootfs" && ls -- *.recipe 2>/dev/null | sed 's/^rabbitmq-//; s/\.recipe$//' \
    | paste -sd ' ' -)
  fail "no root filesystem recipe for RabbitMQ $VERSION (known: ${known:-none})"
fi

# The recipe: key=value lines, # comments. Its canonical text (what the hash names) is the
# same text clusters/rootfs.py hashes: name, suite, packages (single spaces), build, and
# check_valid_until=false where the recipe says so (a suite served past its Valid-Until date).
suite= packages= build= check_valid_until=true
while IFS= read -r line || [ -n "$line" ]; do
  case "$line" in ''|'#'*) continue ;; esac
  key=${line%%=*} value=${line#*=}
  case "$key" in
    suite) suite=$value ;;
    packages) read -r -a words <<<"$value"; packages="${words[*]}" ;;
    build) build=$value ;;
    check_valid_until) check_valid_until=$value ;;
    *) fail "$RECIPE: unknown key '$key'" ;;
  esac
done <"$RECIPE"
[[ "$suite" =~ ^[a-z][a-z0-9-]*$ ]] || fail "$RECIPE: suite '$suite' is not a Debian suite name"
[[ "$packages" =~ ^[a-z0-9][a-z0-9.+-]*( [a-z0-9][a-z0-9.+-]*)*$ ]] \
  || fail "$RECIPE: packages '$packages' is not a list of Debian package names"
[[ "$build" =~ ^[0-9]+$ ]] || fail "$RECIPE: build '$build' is not a number"
[[ "$check_valid_until" =~ ^(true|false)$ ]] \
  || fail "$RECIPE: check_valid_until '$check_valid_until' is not true or false"
read -r -a PKGS <<<"$packages"
canonical=$(printf 'name=%s\nsuite=%s\npackages=%s\nbuild=%s\n' "$NAME" "$suite" "$packages" "$build")
# Only a recipe that says so names it, so that older recipes keep their hash.
[ "$check_valid_until" = true ] || canonical+=$'\ncheck_valid_until=false'
export ROOTFS_CHECK_VALID_UNTIL=$check_valid_until
HASH=$(printf '%s\n' "$canonical" | sha256sum | cut -c1-12)

BASE=$(realpath -m "${RMQH_ROOTFS_DIR:-$HERE/../.state/rootfs}")
DEST="$BASE/$NAME-$HASH"
if [ "$mode" = path ]; then
  echo "$DEST"
  exit 0
fi

complete() { [ -f "$DEST/$MARKER" ] && grep -qx "hash=$HASH" "$DEST/$MARKER"; }
present() {
  echo "build-rootfs: $DEST is present ($(grep -E '^(rabbitmq-server|erlang-base)=' \
    "$DEST/$MARKER" | tr '\n' ' ' | sed 's/ $//')); nothing to do"
  exit 0
}
complete && present

[ "$(id -u)" = 0 ] || fail "needs root (debootstrap, chroot, mount)"
command -v debootstrap >/dev/null || fail "no debootstrap (apt-get install debootstrap)"
command -v unshare >/dev/null || fail "no unshare (apt-get install util-linux)"
# Everything from here on runs in a private mount namespace: our mounts die with it.
if [ -z "${RMQH_ROOTFS_UNSHARED:-}" ]; then
  exec env RMQH_ROOTFS_UNSHARED=1 unshare --mount --propagation private -- bash "$0" "$VERSION"
fi

mkdir -p "$BASE"
exec 9>"$BASE/.$NAME-$HASH.lock"
if ! flock -n 9; then
  echo "build-rootfs: another build of $NAME-$HASH is under way; waiting for it"
  flock 9
fi
complete && present  # the build we waited for made it

TMP="$BASE/.$NAME-$HASH.tmp"
discard() {
  # Unmount first: removing a tree with /proc or /dev mounted inside would reach the host's.
  rootfs_unmount "$1"
  rm -rf --one-file-system "$1"
}
cleanup() { discard "$TMP"; }
trap cleanup EXIT
[ -e "$TMP" ] && echo "build-rootfs: removing $TMP, left by a build that did not finish"
discard "$TMP"
if [ -e "$DEST" ]; then
  echo "build-rootfs: removing $DEST: it has no complete marker, so it cannot be trusted"
  discard "$DEST"
fi

MIRROR=${MIRROR:-$(rootfs_apt_mirror)}
start=$(date +%s)
echo "build-rootfs: building $NAME (Debian $suite minbase + $packages) into $DEST"
rootfs_bootstrap "$TMP" "$suite" "$MIRROR" "$BASE/.$NAME-$HASH" "${PKGS[@]}"

chroot "$TMP" test -x /usr/lib/rabbitmq/bin/rabbitmq-server \
  || fail "the tree has no /usr/lib/rabbitmq/bin/rabbitmq-server; rabbitmq-server's layout changed?"
versions=
for p in rabbitmq-server erlang-base; do
  v=$(chroot "$TMP" dpkg-query -W -f='${Version}' "$p") || fail "dpkg-query $p failed in the tree"
  versions+="$p=$v"$'\n'
done
size=$(du -sh --one-file-system "$TMP" | cut -f1)
seconds=$(( $(date +%s) - start ))
# The marker is written last, then the tree renamed into place (one rename(2), same folder).
{
  printf '%s\n' "$canonical"
  echo "hash=$HASH"
  printf '%s' "$versions"
  echo "rabbit_bin=/usr/lib/rabbitmq/bin"
  echo "mirror=$MIRROR"
  echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "seconds=$seconds"
  echo "size=$size"
} >"$TMP/$MARKER.part"
mv "$TMP/$MARKER.part" "$TMP/$MARKER"
mv -T "$TMP" "$DEST"
trap - EXIT
echo "build-rootfs: built $DEST in $seconds s, $size ($(printf '%s' "$versions" | tr '\n' ' ' \
  | sed 's/ $//'))"
