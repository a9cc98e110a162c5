"""Tests of the root filesystem recipe, place and build (clusters.rootfs, scripts/build-rootfs.sh).

The builds run the real script on a copy of the scripts folder, with fakes of debootstrap and
chroot first on PATH: the fake debootstrap makes a small tree (or fails as an unreachable
mirror does), the fake chroot answers apt-get and dpkg-query and writes down what it saw
(whether policy-rc.d was in place, /proc mounted, the final folder absent). Mounting /proc and
the script's private mount namespace are real, so these need root; nothing reaches a mirror
and no broker starts.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from clusters import rootfs
from clusters.rootfs import (
    Recipe,
    RootfsError,
    ensure_rootfs,
    is_complete,
    load_recipe,
    parse_recipe,
    read_marker,
    rootfs_base,
    rootfs_path,
)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the build mounts /proc: needs root")

RECIPE = "suite=trixie\npackages=rabbitmq-server procps\nbuild=1\n"

FAKE_DEBOOTSTRAP = r"""#!/bin/bash
# debootstrap --variant=minbase SUITE DIR MIRROR, faked: a small tree, or a failure.
set -eu
suite=$2 dir=$3 mirror=$4
echo "debootstrap $1 $suite $dir $mirror" >>"$FAKE_LOG"
mkdir -p "$dir"/usr/sbin "$dir"/proc "$dir"/etc "$dir"/tmp "$dir"/var/lib/apt/lists \
         "$dir"/usr/share/doc/base "$dir"/var/cache/apt
echo "PRETTY_NAME=fake $suite" >"$dir/etc/os-release"
echo list >"$dir/var/lib/apt/lists/x"
echo "I: Retrieving InRelease"
if [ "${FAKE_FAIL:-}" = debootstrap ]; then
  echo "E: Failed getting release file $mirror/dists/$suite/Release" >&2
  exit 1
fi
if [ -n "${FAKE_SLEEP:-}" ]; then sleep "$FAKE_SLEEP"; fi
echo "I: Base system installed successfully."
"""

FAKE_CHROOT = r"""#!/bin/bash
# chroot ROOT CMD..., faked: records what it is asked and what it sees, answers like apt.
root=$1; shift
[ "$1" = env ] && { shift; while [[ "$1" == *=* ]]; do shift; done; }
echo "chroot $*" >>"$FAKE_LOG"
case "$1" in
  apt-get)
    if [ "$2" = install ] || [[ " $* " == *" install "* ]]; then
      [ -x "$root/usr/sbin/policy-rc.d" ] && echo "policy-rc.d present" >>"$FAKE_LOG"
      mountpoint -q "$root/proc" && echo "proc mounted" >>"$FAKE_LOG"
      [ -e "$FAKE_DEST" ] || echo "final folder absent" >>"$FAKE_LOG"
      if [ "${FAKE_FAIL:-}" = apt ]; then
        echo "E: You don't have enough free space in /var/cache/apt/archives/." >&2
        exit 100
      fi
      mkdir -p "$root/usr/lib/rabbitmq/bin"
      printf '#!/bin/sh\n' >"$root/usr/lib/rabbitmq/bin/rabbitmq-server"
      chmod +x "$root/usr/lib/rabbitmq/bin/rabbitmq-server"
    fi ;;
  dpkg-query)
    [ "${FAKE_FAIL:-}" = dpkg ] && { echo "dpkg-query: error: database is locked" >&2; exit 2; }
    case "${!#}" in
      rabbitmq-server) printf '4.0.5-6+fake' ;;
      erlang-base) printf '1:27.3.4.1+fake' ;;
      *) exit 1 ;;
    esac ;;
  test) test "$2" "$root$3" ;;
esac
"""


@pytest.fixture
def kit(tmp_path):
    """A copy of the scripts (build-rootfs.sh, its library, a recipe for 4.0), fakes first on
    PATH, a base folder for the trees and the fakes' log."""
    scripts = tmp_path / "scripts"
    (scripts / "lib").mkdir(parents=True)
    (scripts / "rootfs").mkdir()
    here = Path(rootfs.SCRIPT).parent
    shutil.copy(here / "build-rootfs.sh", scripts / "build-rootfs.sh")
    shutil.copy(here / "lib" / "debian-rootfs.sh", scripts / "lib" / "debian-rootfs.sh")
    (scripts / "rootfs" / "rabbitmq-4.0.recipe").write_text(RECIPE)
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    for name, text in (("debootstrap", FAKE_DEBOOTSTRAP), ("chroot", FAKE_CHROOT)):
        (fakes / name).write_text(text)
        (fakes / name).chmod(0o755)
    base = tmp_path / "base"
    fakelog = tmp_path / "fake.log"
    fakelog.touch()
    recipe = load_recipe("4.0", scripts / "rootfs")
    env = {
        "PATH": f"{fakes}:{os.environ['PATH']}",
        "FAKE_LOG": str(fakelog),
        "FAKE_DEST": str(rootfs_path(recipe, base)),
        "MIRROR": "http://mirror.invalid/debian",
    }
    return _Kit(scripts, base, fakelog, env)


class _Kit:
    def __init__(self, scripts: Path, base: Path, fakelog: Path, env: dict[str, str]) -> None:
        self.scripts, self.base, self.fakelog, self.env = scripts, base, fakelog, env

    def ensure(self, version: str = "4.0", timeout: float = 60.0, **env: str) -> Path:
        return ensure_rootfs(
            version, base=self.base, script=self.scripts / "build-rootfs.sh",
            recipes=self.scripts / "rootfs", env={**self.env, **env}, timeout=timeout,
        )

    def script(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(self.scripts / "build-rootfs.sh"), *args],
            env={**os.environ, **self.env, "RMQH_ROOTFS_DIR": str(self.base), **env},
            capture_output=True, text=True, timeout=60,
        )

    def recipe(self) -> Recipe:
        return load_recipe("4.0", self.scripts / "rootfs")

    def fake_calls(self) -> list[str]:
        return self.fakelog.read_text().splitlines()

    def base_entries(self) -> list[str]:
        """Everything in the base folder but the lock files."""
        if not self.base.exists():
            return []
        return sorted(p.name for p in self.base.iterdir() if not p.name.endswith(".lock"))


def _mounts_under(path: Path) -> list[str]:
    text = Path("/proc/self/mountinfo").read_text()
    return [line for line in text.splitlines() if str(path) in line]


# -- the recipe and its place (pure) -----------------------------------------------------------


def test_recipe_canonical_text_and_hash_are_fixed():
    r = parse_recipe("rabbitmq-4.0", "# a comment\n\nsuite=trixie\npackages= a  b+c \nbuild=3\n")
    assert r == Recipe("rabbitmq-4.0", "trixie", ("a", "b+c"), 3)
    assert r.canonical() == "name=rabbitmq-4.0\nsuite=trixie\npackages=a b+c\nbuild=3\n"
    assert len(r.digest()) == 12 and r.dirname == f"rabbitmq-4.0-{r.digest()}"
    # any part of the recipe names another folder
    for other in (Recipe("rabbitmq-4.1", "trixie", ("a", "b+c"), 3),
                  Recipe("rabbitmq-4.0", "forky", ("a", "b+c"), 3),
                  Recipe("rabbitmq-4.0", "trixie", ("a",), 3),
                  Recipe("rabbitmq-4.0", "trixie", ("a", "b+c"), 4)):
        assert other.digest() != r.digest()


def test_a_recipe_may_read_a_suite_past_its_valid_until_and_says_so_in_its_hash():
    r = parse_recipe("rabbitmq-4.3", "suite=sid\npackages=a\nbuild=1\ncheck_valid_until=false\n")
    assert r.check_valid_until is False
    assert r.canonical() == ("name=rabbitmq-4.3\nsuite=sid\npackages=a\nbuild=1\n"
                             "check_valid_until=false\n")
    checked = parse_recipe("rabbitmq-4.3", "suite=sid\npackages=a\nbuild=1\n"
                                           "check_valid_until=true\n")
    # the default names no key, so recipes written before keep their hash
    assert checked.canonical() == "name=rabbitmq-4.3\nsuite=sid\npackages=a\nbuild=1\n"
    assert checked.digest() != r.digest()


@pytest.mark.parametrize("text, message", [
    ("suite=trixie\npackages=a\nbuild=1\nmirror=x\n", "unknown key 'mirror'"),
    ("suite=sid\npackages=a\nbuild=1\ncheck_valid_until=no\n", "is not true or false"),
    ("suite=trixie\npackages=a\n", "lacks build"),
    ("suite=Trixie!\npackages=a\nbuild=1\n", "not a Debian suite"),
    ("suite=trixie\npackages=a B\nbuild=1\n", "not Debian package names"),
    ("suite=trixie\npackages=\nbuild=1\n", "not Debian package names"),
    ("suite=trixie\npackages=a\nbuild=one\n", "not a number"),
])
def test_bad_recipes_are_refused(text, message):
    with pytest.raises(RootfsError, match=message):
        parse_recipe("rabbitmq-4.0", text)


def test_the_project_recipe_for_4_0_is_debian_13_with_the_broker():
    r = load_recipe("4.0")
    assert r.suite == "trixie" and "rabbitmq-server" in r.packages and r.check_valid_until
    assert rootfs.known_versions() == ["4.0", "4.3"]


def test_the_project_recipe_for_4_3_is_debian_unstable_read_past_its_valid_until():
    r = load_recipe("4.3")
    assert r.suite == "sid" and "rabbitmq-server" in r.packages and not r.check_valid_until


def test_an_unknown_version_is_refused_naming_the_known_ones(kit):
    with pytest.raises(RootfsError, match=r"no root filesystem recipe for RabbitMQ 3\.10 "
                                          r"\(known: 4\.0\)"):
        kit.ensure("3.10")
    res = kit.script("3.10")
    assert res.returncode == 2
    assert "no root filesystem recipe for RabbitMQ 3.10 (known: 4.0)" in res.stderr


def test_the_script_and_the_module_agree_on_the_place(kit, tmp_path):
    assert kit.script("--path", "4.0").stdout.strip() == str(rootfs_path(kit.recipe(), kit.base))
    # the project's own script and recipe too, under the default base
    real = subprocess.run(["bash", str(rootfs.SCRIPT), "--path"], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != rootfs.BASE_ENV},
                          check=True)
    assert real.stdout.strip() == str(rootfs_path(load_recipe("4.0"), rootfs.DEFAULT_BASE))
    real = subprocess.run(["bash", str(rootfs.SCRIPT), "--path", "4.3"], capture_output=True,
                          text=True, check=True,
                          env={k: v for k, v in os.environ.items() if k != rootfs.BASE_ENV})
    assert real.stdout.strip() == str(rootfs_path(load_recipe("4.3"), rootfs.DEFAULT_BASE))


@needs_root
def test_a_suite_past_its_valid_until_is_read_by_apt_in_the_tree(kit):
    (kit.scripts / "rootfs" / "rabbitmq-4.0.recipe").write_text(
        RECIPE + "check_valid_until=false\n")
    recipe = kit.recipe()
    path = kit.ensure(FAKE_DEST=str(rootfs_path(recipe, kit.base)))
    assert is_complete(path, recipe)
    conf = path / "etc/apt/apt.conf.d/99rmqh-valid-until"
    assert conf.read_text() == 'Acquire::Check-Valid-Until "false";\n'
    assert read_marker(path)["check_valid_until"] == "false"


def test_base_comes_from_the_environment_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert rootfs_base({}) == rootfs.DEFAULT_BASE
    assert rootfs_base({"RMQH_ROOTFS_DIR": "trees"}) == tmp_path / "trees"


def test_completeness_is_the_marker_naming_the_recipe(tmp_path):
    r = Recipe("rabbitmq-4.0", "trixie", ("a",), 1)
    tree = tmp_path / r.dirname
    assert not is_complete(tree, r) and read_marker(tree) is None
    tree.mkdir()
    assert not is_complete(tree, r)  # a folder without its marker is not trusted
    (tree / rootfs.MARKER).write_text("hash=000000000000\n")
    assert not is_complete(tree, r)
    (tree / rootfs.MARKER).write_text(r.canonical() + f"hash={r.digest()}\nrabbitmq-server=4\n")
    assert is_complete(tree, r) and read_marker(tree)["rabbitmq-server"] == "4"


# -- builds, with the fakes --------------------------------------------------------------------


@needs_root
def test_a_build_is_renamed_into_place_complete_and_says_so(kit, caplog):
    caplog.set_level(logging.INFO, logger="clusters.rootfs")
    recipe = kit.recipe()
    path = kit.ensure()
    assert path == rootfs_path(recipe, kit.base) and is_complete(path, recipe)
    marker = read_marker(path)
    assert marker is not None
    assert marker["hash"] == recipe.digest() and marker["suite"] == "trixie"
    assert marker["rabbitmq-server"] == "4.0.5-6+fake"
    assert marker["erlang-base"] == "1:27.3.4.1+fake"
    assert marker["rabbit_bin"] == "/usr/lib/rabbitmq/bin"
    assert marker["mirror"] == "http://mirror.invalid/debian"

    calls = kit.fake_calls()
    # debootstrap built a hidden folder beside the final one (same filesystem: one rename)
    boot = calls[0].split()
    assert boot[:3] == ["debootstrap", "--variant=minbase", "trixie"]
    built_in = Path(boot[3])
    assert built_in.parent == kit.base and built_in.name.startswith(".")
    assert not built_in.exists()
    # while packages were installed: no service could start, /proc was there, and the final
    # folder did not exist yet
    assert "chroot apt-get install -y -qq --no-install-recommends rabbitmq-server procps" in calls
    assert {"policy-rc.d present", "proc mounted", "final folder absent"} <= set(calls)
    assert not (path / "usr/sbin/policy-rc.d").exists()
    assert not list((path / "var/lib/apt/lists").iterdir())  # trimmed
    assert kit.base_entries() == [path.name]
    assert _mounts_under(kit.base) == []

    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith(f"build-rootfs: building rabbitmq-4.0 (Debian trixie minbase + "
                            f"rabbitmq-server procps) into {path}") for m in said)
    assert "build-rootfs: debootstrap trixie (minbase) from http://mirror.invalid/debian" in said
    done = [m for m in said if m.startswith(f"build-rootfs: built {path} in ")]
    assert len(done) == 1
    assert "(rabbitmq-server=4.0.5-6+fake erlang-base=1:27.3.4.1+fake)" in done[0]


@needs_root
def test_a_present_tree_is_not_built_again(kit, caplog):
    first = kit.ensure()
    calls = kit.fake_calls()
    caplog.set_level(logging.INFO, logger="clusters.rootfs")
    caplog.clear()  # the first build's lines (captured when an earlier test set the root level)
    assert kit.ensure() == first
    assert kit.fake_calls() == calls  # the module did not even run the script
    assert caplog.records == []
    res = kit.script("4.0")  # nor does the script build, run by hand
    assert res.returncode == 0, res.stderr
    assert res.stdout == (f"build-rootfs: {first} is present (rabbitmq-server=4.0.5-6+fake "
                          "erlang-base=1:27.3.4.1+fake); nothing to do\n")
    assert kit.fake_calls() == calls


@needs_root
def test_a_changed_recipe_is_a_new_folder(kit):
    old = kit.ensure()
    (kit.scripts / "rootfs" / "rabbitmq-4.0.recipe").write_text(
        RECIPE.replace("procps", "procps iproute2"))
    new = kit.ensure(FAKE_DEST=str(rootfs_path(kit.recipe(), kit.base)))
    assert new != old and new.parent == old.parent
    assert is_complete(new, kit.recipe())
    assert read_marker(new)["packages"] == "rabbitmq-server procps iproute2"
    assert read_marker(old)["packages"] == "rabbitmq-server procps"  # left as it was
    assert kit.base_entries() == sorted([old.name, new.name])
    assert sum(c.startswith("debootstrap") for c in kit.fake_calls()) == 2


@needs_root
def test_an_unreachable_mirror_fails_with_its_own_error_and_leaves_nothing(kit):
    with pytest.raises(RootfsError) as e:
        kit.ensure(FAKE_FAIL="debootstrap")
    text = str(e.value)
    assert "building the RabbitMQ 4.0 root filesystem failed (exit 2)" in text
    assert "E: Failed getting release file http://mirror.invalid/debian/dists/trixie/Release" in text
    assert "build-rootfs: debootstrap failed (exit 1; log: " in text
    assert kit.base_entries() == [f".rabbitmq-4.0-{kit.recipe().digest()}.debootstrap.log"]
    assert _mounts_under(kit.base) == []
    assert not is_complete(rootfs_path(kit.recipe(), kit.base), kit.recipe())


@needs_root
def test_a_full_disk_while_installing_leaves_no_tree_and_no_mount(kit):
    with pytest.raises(RootfsError) as e:
        kit.ensure(FAKE_FAIL="apt")
    text = str(e.value)
    assert "E: You don't have enough free space in /var/cache/apt/archives/." in text
    assert "apt-get install in the chroot failed (exit 100" in text
    # /proc was mounted when apt failed: it was unmounted (rm --one-file-system would have
    # refused the tree otherwise) and the tree removed; only the log is left
    assert "proc mounted" in kit.fake_calls()
    assert kit.base_entries() == [f".rabbitmq-4.0-{kit.recipe().digest()}.apt.log"]
    assert _mounts_under(kit.base) == []
    # and the next build, the mirror back, builds it
    assert is_complete(kit.ensure(), kit.recipe())


@needs_root
def test_what_a_killed_build_left_is_not_trusted_and_is_removed(kit, caplog):
    caplog.set_level(logging.INFO, logger="clusters.rootfs")
    recipe = kit.recipe()
    with pytest.raises(RootfsError, match="timed out"):
        kit.ensure(timeout=5, FAKE_SLEEP="60")
    tmp = kit.base / f".{recipe.dirname}.tmp"
    assert tmp.is_dir()  # SIGKILL: no trap ran; the hidden folder is what it left
    # a folder under the final name but without the marker (copied by hand, say)
    dest = rootfs_path(recipe, kit.base)
    (dest / "usr").mkdir(parents=True)
    assert not is_complete(dest, recipe)
    path = kit.ensure()
    assert path == dest and is_complete(path, recipe)
    said = [r.getMessage() for r in caplog.records]
    assert f"build-rootfs: removing {tmp}, left by a build that did not finish" in said
    assert (f"build-rootfs: removing {dest}: it has no complete marker, so it cannot be trusted"
            in said)
    assert kit.base_entries() == [dest.name]


@needs_root
def test_a_step_failing_after_the_install_leaves_no_tree_and_the_next_build_is_not_fooled(kit):
    # The packages installed, then reading their versions failed: the marker never came, so
    # the hidden folder goes and no folder under the final name is left to trust.
    with pytest.raises(RootfsError) as e:
        kit.ensure(FAKE_FAIL="dpkg")
    assert "dpkg-query rabbitmq-server failed in the tree" in str(e.value)
    assert "(exit 2)" in str(e.value)
    assert not [n for n in kit.base_entries() if not n.endswith(".log")]
    assert _mounts_under(kit.base) == []
    assert is_complete(kit.ensure(), kit.recipe())


def test_a_build_that_says_it_succeeded_but_left_no_marker_is_not_trusted(kit, tmp_path):
    # A build command that exits 0 without the marker (a script broken half-way, a disk that
    # swallowed the last write): the module refuses the tree and the next call builds again.
    recipe = kit.recipe()
    dest = rootfs_path(recipe, kit.base)
    liar = tmp_path / "liar.sh"
    liar.write_text(f"#!/bin/bash\nmkdir -p {dest}/usr/lib/rabbitmq/bin\n"
                    f"echo 'build-rootfs: built {dest}'\n")
    for _ in range(2):
        with pytest.raises(RootfsError, match=r"left no complete tree at .*\nbuild-rootfs: built"):
            ensure_rootfs("4.0", base=kit.base, script=liar, recipes=kit.scripts / "rootfs",
                          env=kit.env, timeout=30)
        assert dest.is_dir() and not is_complete(dest, recipe)


def test_the_shared_library_is_valid_bash():
    here = Path(rootfs.SCRIPT).parent
    for script in ("build-rootfs.sh", "build-docker-image.sh", "lib/debian-rootfs.sh"):
        subprocess.run(["bash", "-n", str(here / script)], check=True)


def test_the_mirror_is_the_one_apt_uses(tmp_path):
    lib = Path(rootfs.SCRIPT).parent / "lib" / "debian-rootfs.sh"
    out = subprocess.run(["bash", "-c", f". {lib}; rootfs_apt_mirror"], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out.startswith("http") and "security" not in out
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.exists():
        assert out in sources.read_text()
