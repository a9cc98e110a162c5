"""A RabbitMQ home holding only the applications a node runs: the same broker, booted faster.

RabbitMQ's scripts take the broker's home from where they live (RABBITMQ_HOME is the folder
above RABBITMQ_SCRIPTS_DIR) and put every application folder of its `plugins/` on the Erlang
code path (ERL_LIBS). A Debian package's plugins folder holds every plugin and its
dependencies, 71 applications on 3.10 and 78 on 4.0, while a node that enables no plugins runs
about twenty of them: rabbit and its dependencies. The rest cost boot time all the same: a 3.10
node alone booted in 6.0 s on 5.0 CPU seconds from Debian's home, in 3.0 s on 2.5 from a home
whose plugins folder held rabbit's dependencies only, loading the same 958 modules of the same
34 applications either way: the difference is the other 51 folders on the code path, which
the node looks through as it boots. On a 2-core machine booting three nodes at once, that CPU
is the cluster's ready time.

`make_home` builds such a home in a folder of the run's: `bin/` and `escript/` link the
release's own scripts, `plugins/` links the application folders of rabbit, the enabled
plugins (`ENABLED_PLUGINS`) and everything they need, found by following the `applications`
and `included_applications` of their `.app` files (the rest are Erlang/OTP's own). The links
name the release's files by their paths inside its tree (`/` for this host's packages, the
root filesystem's own paths for a chrooted release), so they resolve where the node runs. A
broker command reaches the home by running `<home>/bin/<tool>` with RABBITMQ_SCRIPTS_DIR set
to `<home>/bin` (`scripts_env`).

`app_dependencies` and `closure` are pure; `make_home` reads the tree and writes the folder.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from clusters.errors import ClusterError

# Where a Debian rabbitmq-server package installs the broker, inside its tree.
SERVER_GLOB = "usr/lib/rabbitmq/lib/rabbitmq_server-*"
# The plugins RabbitBroker enables on every node (its enabled_plugins file): none.
ENABLED_PLUGINS: tuple[str, ...] = ()
# The application every node runs.
BROKER_APP = "rabbit"

_APP_FOLDER = re.compile(r"(?P<name>[a-z][a-z0-9_]*)-(?P<version>[0-9][0-9A-Za-z.+-]*)")
_LIST = r"\{\s*%s\s*,\s*\[(?P<items>[^\]]*)\]"


class ServerHomeError(ClusterError, RuntimeError):
    """The release's tree has no broker, or lacks an application the node needs."""


def app_dependencies(app_text: str) -> tuple[str, ...]:
    """Takes the text of an application's `.app` file. Returns the applications it starts
    before itself and those it includes (`applications`, `included_applications`), in order."""
    names: list[str] = []
    for key in ("applications", "included_applications"):
        m = re.search(_LIST % key, app_text)
        if m:
            names += [x.strip().strip("'") for x in m.group("items").split(",") if x.strip()]
    return tuple(names)


def closure(dependencies: Mapping[str, Iterable[str]], roots: Iterable[str]) -> set[str]:
    """Takes each application's dependencies and the applications a node runs. Returns those
    and everything they need, among the applications `dependencies` knows (the others are
    found elsewhere on the code path: Erlang/OTP's)."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        app = todo.pop()
        if app in seen or app not in dependencies:
            continue
        seen.add(app)
        todo += dependencies[app]
    return seen


def server_dir(tree: Path) -> Path:
    """Takes a tree ("/" for this host, or a root filesystem). Returns the folder its
    rabbitmq-server package installed the broker in. Raises ServerHomeError unless there is
    exactly one."""
    found = sorted(p for p in tree.glob(SERVER_GLOB) if p.is_dir())
    if len(found) != 1:
        raise ServerHomeError(f"expected one RabbitMQ server under {tree / SERVER_GLOB}, "
                              f"found {len(found)}")
    return found[0]


def _applications(plugins: Path) -> dict[str, tuple[str, Path]]:
    """Takes a plugins folder. Returns {application: (its folder's name, its .app file)}."""
    apps = {}
    for entry in sorted(plugins.iterdir()):
        m = _APP_FOLDER.fullmatch(entry.name)
        app_file = entry / "ebin" / f"{m.group('name')}.app" if m else None
        if m and app_file and app_file.is_file():
            apps[m.group("name")] = (entry.name, app_file)
    return apps


def make_home(tree: Path, dest: Path, plugins: Iterable[str] = ENABLED_PLUGINS) -> list[str]:
    """Takes the tree the release's broker is installed in, the folder to make the home in (a
    path the node sees at the same place) and the plugins the nodes enable. Replaces dest with
    the home. Returns the application folders its plugins folder links. Raises ServerHomeError
    when the tree has no broker or lacks one of the roots."""
    server = server_dir(tree)
    inside = Path("/") / server.relative_to(tree)  # the server folder where the node runs
    apps = _applications(server / "plugins")
    roots = (BROKER_APP, *plugins)
    missing = [a for a in roots if a not in apps]
    if missing:
        raise ServerHomeError(f"{server / 'plugins'} has no {', '.join(missing)}")
    deps = {name: app_dependencies(app_file.read_text(errors="replace"))
            for name, (_, app_file) in apps.items()}
    folders = sorted(apps[a][0] for a in closure(deps, roots))
    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    shutil.rmtree(dest, ignore_errors=True)
    (dest / "bin").mkdir(parents=True)
    (dest / "plugins").mkdir()
    for script in sorted((server / "sbin").iterdir()):
        os.symlink(inside / "sbin" / script.name, dest / "bin" / script.name)
    os.symlink(inside / "escript", dest / "escript")
    for folder in folders:
        os.symlink(inside / "plugins" / folder, dest / "plugins" / folder)
    return folders


def scripts_env(home: str) -> dict[str, str]:
    """Takes a home made by make_home. Returns the environment that has the release's scripts
    take it as RABBITMQ_HOME."""
    return {"RABBITMQ_SCRIPTS_DIR": f"{home}/bin"}
