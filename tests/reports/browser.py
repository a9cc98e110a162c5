"""A headless Chromium for tests, driven over the DevTools protocol through a pipe.

`Browser` starts Debian's /usr/bin/chromium with `--remote-debugging-pipe`:
Chromium reads protocol commands from fd 3 and writes replies and events to
fd 4, each message a JSON object ended by a NUL byte (the transport Puppeteer
and Playwright use). No Python package and no downloaded browser build are
needed, and only stable protocol domains are used (Target, Page, Runtime,
Log, Emulation), so a newer Chromium keeps working.

`Browser.inspect(path, screenshot)` opens a local HTML file in a fresh tab of
a given width, waits for it to load, takes a full-page screenshot and returns
a `PageCheck`: console errors and uncaught exceptions, table cells with no
text, images that did not load, links (relative hrefs and #fragments), and
the page's scroll width. `Browser.read(path, expression)` opens a page,
dismisses and records any dialog (an alert() that ran), and returns what an
expression evaluated in it says.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import logging
import os
import select
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

CHROMIUM = "/usr/bin/chromium"
# Chromium as root in a container: no sandbox, no GPU, nothing that phones home.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--mute-audio",
    "--remote-debugging-pipe",
)
TIMEOUT_S = 30.0

# Runs in the page after load; returns what the checks need as one JSON-able object.
_PROBE = """
(() => {
  const cells = [];
  for (const c of document.querySelectorAll('td, th')) {
    if (c.textContent.trim() === '' && !c.querySelector('img')) {
      const row = c.parentElement ? c.parentElement.textContent.trim().slice(0, 80) : '';
      cells.push(c.tagName + ' in row: ' + row);
    }
  }
  const images = Array.from(document.images).map(i => ({
    src: i.getAttribute('src'), complete: i.complete, width: i.naturalWidth}));
  const links = Array.from(document.querySelectorAll('a[href], link[href]'))
    .map(a => a.getAttribute('href'));
  const ids = Array.from(document.querySelectorAll('[id]')).map(e => e.id);
  return {
    blankCells: cells, images: images, links: links, ids: ids,
    scrollWidth: Math.max(document.documentElement.scrollWidth, document.body.scrollWidth),
    scrollHeight: Math.max(document.documentElement.scrollHeight, document.body.scrollHeight),
    title: document.title,
  };
})()
"""


class BrowserError(RuntimeError):
    """Chromium could not be started, answered with an error, or did not answer in time."""


@dataclass
class PageCheck:
    """What a page showed in the browser."""

    url: str
    title: str = ""
    console_errors: list[str] = field(default_factory=list)
    blank_cells: list[str] = field(default_factory=list)
    images: list[dict[str, Any]] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    scroll_width: int = 0
    scroll_height: int = 0
    screenshot: Path | None = None

    @property
    def broken_images(self) -> list[str]:
        """Returns the src of every image that did not load."""
        return [str(i["src"]) for i in self.images if not i["complete"] or i["width"] <= 0]


class Browser:
    """One headless Chromium process; use as a context manager. Takes the executable path."""

    def __init__(self, executable: str = CHROMIUM) -> None:
        self.executable = executable
        self._profile = Path(tempfile.mkdtemp(prefix="chromium-profile-"))
        self._log_path = self._profile.parent / (self._profile.name + ".log")
        self._pid: int | None = None
        self._to: int | None = None
        self._from: int | None = None
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []

    def __enter__(self) -> Browser:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Starts Chromium with the pipe on fds 3 and 4. Raises BrowserError if it does not answer."""
        if not os.access(self.executable, os.X_OK):
            raise BrowserError(f"{self.executable} is missing: `make setup` installs chromium")
        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        # Move the child's ends above 4, so the dup2s onto 3 and 4 cannot clobber each other.
        child_in = fcntl.fcntl(cmd_r, fcntl.F_DUPFD_CLOEXEC, 10)
        child_out = fcntl.fcntl(res_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(cmd_r)
        os.close(res_w)
        logfd = os.open(self._log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        argv = [self.executable, *FLAGS, f"--user-data-dir={self._profile}", "about:blank"]
        try:
            self._pid = os.posix_spawn(
                self.executable,
                argv,
                {**os.environ, "HOME": str(self._profile)},
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, logfd, 1),
                    (os.POSIX_SPAWN_DUP2, logfd, 2),
                    (os.POSIX_SPAWN_DUP2, child_in, 3),
                    (os.POSIX_SPAWN_DUP2, child_out, 4),
                ],
                setsid=True,
            )
        finally:
            os.close(child_in)
            os.close(child_out)
            os.close(logfd)
        self._to, self._from = cmd_w, res_r
        try:
            version = self.send("Browser.getVersion")
        except BrowserError:
            self.close()
            raise
        log.info("chromium %s", version.get("product"))

    def close(self) -> None:
        """Ends Chromium (politely, then by signal to its process group) and removes its profile."""
        if self._pid is not None:
            try:
                if self._to is not None:
                    self._write({"id": self._new_id(), "method": "Browser.close"})
            except OSError:
                pass
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                pid, _ = os.waitpid(self._pid, os.WNOHANG)
                if pid:
                    break
                time.sleep(0.05)
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._pid, signal.SIGKILL)
                os.waitpid(self._pid, 0)
            self._pid = None
        for fd in (self._to, self._from):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._to = self._from = None
        shutil.rmtree(self._profile, ignore_errors=True)

    @property
    def log_text(self) -> str:
        """Returns what Chromium wrote on stdout and stderr."""
        try:
            return self._log_path.read_text(errors="replace")
        except OSError:
            return ""

    # -- the protocol ------------------------------------------------------------------------

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _write(self, msg: dict[str, Any]) -> None:
        assert self._to is not None
        data = json.dumps(msg).encode() + b"\0"
        while data:
            n = os.write(self._to, data)
            data = data[n:]

    def _read(self, deadline: float) -> dict[str, Any]:
        assert self._from is not None
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"chromium did not answer in time; its log:\n{self.log_text}")
            ready, _, _ = select.select([self._from], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._from, 1 << 20)
            if not chunk:
                raise BrowserError(f"chromium closed the pipe; its log:\n{self.log_text}")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        msg: dict[str, Any] = json.loads(raw)
        return msg

    def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
        timeout: float = TIMEOUT_S,
    ) -> dict[str, Any]:
        """Takes a protocol method, its params and a target session. Returns the result,
        keeping events that arrive meanwhile. Raises BrowserError on an error reply."""
        msg: dict[str, Any] = {"id": self._new_id(), "method": method, "params": params or {}}
        if session is not None:
            msg["sessionId"] = session
        self._write(msg)
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == msg["id"]:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            if "method" in reply:
                self._events.append(reply)

    def wait_event(self, method: str, session: str, timeout: float = TIMEOUT_S) -> dict[str, Any]:
        """Takes an event name and session. Returns the first such event, kept or new."""
        deadline = time.monotonic() + timeout
        while True:
            for ev in self._events:
                if ev.get("method") == method and ev.get("sessionId") == session:
                    self._events.remove(ev)
                    return ev
            reply = self._read(deadline)
            if "method" in reply:
                self._events.append(reply)

    def _drain_events(self, session: str) -> list[dict[str, Any]]:
        """Returns (and forgets) the kept events of a session, after reading what is pending."""
        assert self._from is not None
        while True:
            ready, _, _ = select.select([self._from], [], [], 0.2)
            if not ready and b"\0" not in self._buffer:
                break
            reply = self._read(time.monotonic() + TIMEOUT_S)
            if "method" in reply:
                self._events.append(reply)
        mine = [e for e in self._events if e.get("sessionId") == session]
        self._events = [e for e in self._events if e.get("sessionId") != session]
        return mine

    # -- a page ------------------------------------------------------------------------------

    def inspect(self, page: Path, screenshot: Path, width: int = 1280, height: int = 900) -> PageCheck:
        """Takes a local HTML file, where to save a full-page PNG, and the window size.

        Returns what the page showed: see PageCheck.
        """
        url = page.resolve().as_uri()
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send(
            "Target.attachToTarget", {"targetId": target, "flatten": True}
        )["sessionId"]
        try:
            for domain in ("Page", "Runtime", "Log"):
                self.send(f"{domain}.enable", session=session)
            self.send(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                session=session,
            )
            self.send("Page.navigate", {"url": url}, session=session)
            self.wait_event("Page.loadEventFired", session)
            probe = self.send(
                "Runtime.evaluate",
                {"expression": _PROBE, "returnByValue": True, "awaitPromise": True},
                session=session,
            )
            value = probe["result"]["value"]
            shot = self.send(
                "Page.captureScreenshot",
                {
                    "format": "png",
                    "captureBeyondViewport": True,
                    "clip": {
                        "x": 0, "y": 0, "width": width,
                        "height": max(height, int(value["scrollHeight"])), "scale": 1,
                    },
                },
                session=session,
            )
            screenshot.write_bytes(base64.b64decode(shot["data"]))
            errors = [_console_error(e) for e in self._drain_events(session)]
        finally:
            self.send("Target.closeTarget", {"targetId": target})
        return PageCheck(
            url=url,
            title=str(value["title"]),
            console_errors=[e for e in errors if e],
            blank_cells=list(value["blankCells"]),
            images=list(value["images"]),
            links=[str(x) for x in value["links"]],
            ids=[str(x) for x in value["ids"]],
            scroll_width=int(value["scrollWidth"]),
            scroll_height=int(value["scrollHeight"]),
            screenshot=screenshot,
        )


    def read(self, page: Path, expression: str, timeout: float = TIMEOUT_S) -> PageRead:
        """Takes a local HTML file and a JavaScript expression. Opens the page, waits for it to
        load (or for a dialog: an alert() that ran), dismisses any dialog, and evaluates the
        expression. Returns its value, the dialogs that opened and the console errors."""
        url = page.resolve().as_uri()
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send(
            "Target.attachToTarget", {"targetId": target, "flatten": True}
        )["sessionId"]
        dialogs: list[str] = []
        try:
            for domain in ("Page", "Runtime", "Log"):
                self.send(f"{domain}.enable", session=session)
            self.send("Page.navigate", {"url": url}, session=session)
            deadline = time.monotonic() + timeout
            loaded = False
            while not loaded:
                for ev in list(self._events):
                    if ev.get("sessionId") != session:
                        continue
                    if ev.get("method") == "Page.javascriptDialogOpening":
                        self._events.remove(ev)
                        dialogs.append(str(ev.get("params", {}).get("message")))
                        self.send("Page.handleJavaScriptDialog", {"accept": True},
                                  session=session)
                    elif ev.get("method") == "Page.loadEventFired":
                        self._events.remove(ev)
                        loaded = True
                if not loaded:
                    reply = self._read(deadline)
                    if "method" in reply:
                        self._events.append(reply)
            value = self.send(
                "Runtime.evaluate",
                {"expression": expression, "returnByValue": True, "awaitPromise": True},
                session=session,
            )["result"].get("value")
            events = self._drain_events(session)
            dialogs += [str(e.get("params", {}).get("message")) for e in events
                        if e.get("method") == "Page.javascriptDialogOpening"]
            errors = [_console_error(e) for e in events]
        finally:
            self.send("Target.closeTarget", {"targetId": target})
        return PageRead(url, value, dialogs, [e for e in errors if e])


@dataclass
class PageRead:
    """What `Browser.read` found: the expression's value, the dialogs opened (an alert()'s
    message), the console errors."""

    url: str
    value: Any
    dialogs: list[str]
    console_errors: list[str]


def _console_error(event: dict[str, Any]) -> str | None:
    """Takes a protocol event. Returns its text when it is a console error or an exception."""
    method, params = event.get("method"), event.get("params", {})
    if method == "Runtime.exceptionThrown":
        details = params.get("exceptionDetails", {})
        return f"exception: {details.get('text')} {details.get('exception', {}).get('description', '')}"
    if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
        return "console: " + " ".join(str(a.get("value", a.get("description"))) for a in params.get("args", []))
    if method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
        entry = params["entry"]
        return f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}".strip()
    return None
