"""The Debian root filesystems newer RabbitMQ releases run from: recipe, place, build.

This host's Debian ships rabbitmq-server 3.10; RabbitMQ 4.0 comes from Debian 13, whose
binaries need Debian 13's C library, so its nodes run from a Debian 13 tree entered with
chroot. `scripts/build-rootfs.sh` builds that tree from a recipe,
`scripts/rootfs/rabbitmq-<version>.recipe` (suite, packages, build number), into
`<base>/rabbitmq-<version>-<hash>/`, the hash naming the recipe: a changed recipe is a new
folder, an unchanged one is built once. The base is `$RMQH_ROOTFS_DIR`, else `.state/rootfs`.

Everything here but `ensure_rootfs` is pure or only reads files: the recipe and its canonical
text (the same text the script hashes), where a version's tree lives, and whether it is
complete (its marker `.rmqh-rootfs`, written last, names the recipe's hash and the installed
versions). `ensure_rootfs` runs the script when the tree is missing and raises `RootfsError`,
with the script's own message, when the build fails.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from clusters.errors import ClusterError

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = PROJECT_ROOT / "scripts" / "build-rootfs.sh"
RECIPES = PROJECT_ROOT / "scripts" / "rootfs"
DEFAULT_BASE = PROJECT_ROOT / ".state" / "rootfs"
BASE_ENV = "RMQH_ROOTFS_DIR"
MARKER = ".rmqh-rootfs"
BUILD_TIMEOUT = 1800.0
_ERROR_LINES = 25

_SUITE = re.compile(r"[a-z][a-z0-9-]*")
_PACKAGE = re.compile(r"[a-z0-9][a-z0-9.+-]*")


class RootfsError(ClusterError, RuntimeError):
    """A root filesystem's recipe is missing or bad, or its build failed."""


@dataclass(frozen=True)
class Recipe:
    """What one root filesystem holds: Debian `suite` minbase plus `packages`, build `build`."""

    name: str
    suite: str
    packages: tuple[str, ...]
    build: int
    check_valid_until: bool = True

    def canonical(self) -> str:
        """Returns the recipe's canonical text, the one scripts/build-rootfs.sh hashes too
        (`check_valid_until=false` only where the recipe says so, so older recipes keep their
        hash)."""
        extra = "" if self.check_valid_until else "check_valid_until=false\n"
        return (
            f"name={self.name}\nsuite={self.suite}\n"
            f"packages={' '.join(self.packages)}\nbuild={self.build}\n{extra}"
        )

    def digest(self) -> str:
        """Returns the recipe's hash: the first 12 hex digits of its canonical text's sha256."""
        return hashlib.sha256(self.canonical().encode()).hexdigest()[:12]

    @property
    def dirname(self) -> str:
        """Returns the tree's folder name, `<name>-<hash>`."""
        return f"{self.name}-{self.digest()}"


def recipe_name(version: str) -> str:
    """Takes a RabbitMQ version ("4.0"). Returns its recipe's name ("rabbitmq-4.0")."""
    return f"rabbitmq-{version}"


def parse_recipe(name: str, text: str) -> Recipe:
    """Takes a recipe's name and the text of its file (key=value lines: suite, packages, build,
    and optionally check_valid_until=false for a suite whose Release file the mirror serves past
    its Valid-Until date, as Debian testing's and unstable's are here; `#` comments). Returns
    the Recipe. Raises RootfsError naming what is wrong."""
    fields: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or key not in ("suite", "packages", "build", "check_valid_until"):
            raise RootfsError(f"recipe {name}, line {lineno}: unknown key {key!r}")
        fields[key] = value
    missing = [k for k in ("suite", "packages", "build") if k not in fields]
    if missing:
        raise RootfsError(f"recipe {name} lacks {', '.join(missing)}")
    suite, packages = fields["suite"], tuple(fields["packages"].split())
    if not _SUITE.fullmatch(suite):
        raise RootfsError(f"recipe {name}: {suite!r} is not a Debian suite name")
    bad = [p for p in packages if not _PACKAGE.fullmatch(p)]
    if not packages or bad:
        raise RootfsError(f"recipe {name}: not Debian package names: {bad or 'none given'}")
    if not fields["build"].isdigit():
        raise RootfsError(f"recipe {name}: build {fields['build']!r} is not a number")
    check = fields.get("check_valid_until", "true")
    if check not in ("true", "false"):
        raise RootfsError(f"recipe {name}: check_valid_until {check!r} is not true or false")
    return Recipe(name, suite, packages, int(fields["build"]), check == "true")


def known_versions(recipes: Path = RECIPES) -> list[str]:
    """Returns the RabbitMQ versions that have a root filesystem recipe, sorted."""
    return sorted(p.name.removeprefix("rabbitmq-").removesuffix(".recipe")
                  for p in recipes.glob("rabbitmq-*.recipe"))


def load_recipe(version: str, recipes: Path = RECIPES) -> Recipe:
    """Takes a RabbitMQ version. Returns its recipe, read from `<recipes>/rabbitmq-<version>.recipe`.

    Raises RootfsError when there is none (naming those there are) or it is malformed.
    """
    name = recipe_name(version)
    try:
        text = (recipes / f"{name}.recipe").read_text(encoding="utf-8")
    except FileNotFoundError:
        known = ", ".join(known_versions(recipes)) or "none"
        raise RootfsError(
            f"no root filesystem recipe for RabbitMQ {version} (known: {known})"
        ) from None
    return parse_recipe(name, text)


def rootfs_base(env: Mapping[str, str] | None = None) -> Path:
    """Takes an environment (default this process's). Returns the folder the trees go under:
    `$RMQH_ROOTFS_DIR` made absolute, else the project's `.state/rootfs`."""
    value = (os.environ if env is None else env).get(BASE_ENV)
    return Path(value).resolve() if value else DEFAULT_BASE


def rootfs_path(recipe: Recipe, base: Path) -> Path:
    """Takes a recipe and the base folder. Returns where its tree lives."""
    return base / recipe.dirname


def read_marker(path: Path) -> dict[str, str] | None:
    """Takes a tree's path. Returns its marker's key=value pairs (recipe, hash, versions,
    build time and size), or None when it has none."""
    try:
        text = (path / MARKER).read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    pairs = (line.partition("=") for line in text.splitlines())
    return {k: v for k, sep, v in pairs if sep}


def is_complete(path: Path, recipe: Recipe) -> bool:
    """Takes a tree's path and its recipe. Returns True when the tree is there and complete:
    its marker, written last, names this recipe's hash."""
    marker = read_marker(path)
    return marker is not None and marker.get("hash") == recipe.digest()


def build_command(version: str, script: Path = SCRIPT) -> list[str]:
    """Takes a version and the build script. Returns the command that builds its tree."""
    return ["bash", str(script), version]


def ensure_rootfs(
    version: str,
    *,
    base: Path | None = None,
    script: Path = SCRIPT,
    recipes: Path = RECIPES,
    env: Mapping[str, str] | None = None,
    timeout: float = BUILD_TIMEOUT,
) -> Path:
    """Takes a RabbitMQ version. Returns the path of its complete root filesystem, building it
    first (scripts/build-rootfs.sh, whose lines are logged as they come) when it is missing.

    `base` defaults to rootfs_base(env); `env` adds to this process's environment for the
    script. Raises RootfsError for an unknown version, or with the script's last lines when
    the build fails, runs past `timeout` seconds (it is killed; its half-built folder is not
    trusted and the next build removes it) or leaves no complete tree where expected.
    """
    recipe = load_recipe(version, recipes)
    full_env = {**os.environ, **(env or {})}
    base = rootfs_base(full_env) if base is None else base
    path = rootfs_path(recipe, base)
    if is_complete(path, recipe):
        return path
    log.info("root filesystem for RabbitMQ %s is missing; building %s", version, path)
    full_env[BASE_ENV] = str(base)
    rc, lines = _run_logged(build_command(version, script), full_env, timeout)
    tail = "\n".join(lines[-_ERROR_LINES:])
    if rc != 0:
        raise RootfsError(f"building the RabbitMQ {version} root filesystem failed "
                          f"(exit {rc}):\n{tail}")
    if not is_complete(path, recipe):
        raise RootfsError(f"the build of the RabbitMQ {version} root filesystem left no complete "
                          f"tree at {path}:\n{tail}")
    return path


def _run_logged(argv: Sequence[str], env: Mapping[str, str],
                timeout: float) -> tuple[int | str, list[str]]:
    """Runs argv in a session of its own, logging each output line as it comes. Returns its
    exit code ("timed out" when it was killed past the timeout) and its lines."""
    proc = subprocess.Popen(
        list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env=dict(env), text=True, errors="replace", start_new_session=True,
    )
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            log.info("%s", lines[-1])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    started = time.monotonic()
    try:
        rc: int | str = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        rc = "timed out"
        lines.append(f"killed after {time.monotonic() - started:.0f} s")
    reader.join(timeout=5)
    return rc, lines
