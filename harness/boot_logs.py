"""What a node's logs say of its last boot: why it failed, read line by line.

A broker that would not boot leaves its reason in its log directory: the "BOOT
FAILED" banner with the exception and the frame under it, or an application start
failure, or a process's crash in a boot that never completed. `boot_failure` finds
those lines in one file, `evidence_of` in a node's files with their file and line,
and `failure_since` in what one boot wrote (recovery compares two boots by it,
harness.recovery; harness.unbootable records the node). Pure: texts in, lines out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

# A log line's own prefix (time, level, Erlang pid), left out of the text quoted.
_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d[ T][0-9:.+\-]+ \[\w+\] <[0-9.]+> ?")
# The line of a boot failure's exception, and other last words of a broker that did not boot.
ERROR = re.compile(r"^(error|exit|throw):")
_LAST_WORDS = ("application_start_failure", "Kernel pid terminated",
               "init terminating in do_boot")
# A boot that hangs rather than fails: a process crashed after the last boot began and the broker
# never said its startup was complete (3.10.8 after a power cut: the message store's rebuild,
# `{badmatch,#{}}` in rabbit_queue_index:scan_queue_segments, on every boot).
_BOOT_BEGAN = " Starting RabbitMQ "
_BOOT_DONE = "Server startup complete"
_CRASH = "** Reason for termination =="
# The log files read first: the broker's own output, where 3.10 writes the banner of a boot that
# failed before its log handlers were switched on.
FIRST = ("startup.out",)
MAX_QUOTE = 300
# An Erlang pid, which differs from boot to boot where the failure does not.
_PID = re.compile(r"<\d+\.\d+\.\d+>")


def _clean(line: str) -> str:
    return _PREFIX.sub("", line).strip()[:MAX_QUOTE]


def boot_failure(text: str) -> list[tuple[int, str]]:
    """Takes a log file's text. Returns the lines (1-based number, text without the log's
    prefix) that say why the broker's last boot failed: the last "BOOT FAILED" banner, the
    exception under it (error:..., exit:...) and the first frame after that; else the last
    line naming an application start failure or a terminated kernel; else a process's crash in
    a last boot that never completed (`crash_in_boot`); else nothing."""
    lines = text.splitlines()
    banner = next((i for i in range(len(lines) - 1, -1, -1) if "BOOT FAILED" in lines[i]), None)
    if banner is None:
        last = next((i for i in range(len(lines) - 1, -1, -1)
                     if any(w in lines[i] for w in _LAST_WORDS)), None)
        return crash_in_boot(lines) if last is None else [(last + 1, _clean(lines[last]))]
    found = [(banner + 1, _clean(lines[banner]))]
    for k in range(banner + 1, min(len(lines), banner + 12)):
        if ERROR.match(_clean(lines[k])):
            found.append((k + 1, _clean(lines[k])))
            frame = next((m for m in range(k + 1, min(len(lines), k + 4))
                          if _clean(lines[m])), None)
            if frame is not None:
                found.append((frame + 1, _clean(lines[frame])))
            break
    return found


def crash_in_boot(lines: Sequence[str]) -> list[tuple[int, str]]:
    """Takes a log file's lines. Returns, when the last boot began and never completed and a
    process crashed in it, the first crash's reason and the frame that raised it with its file
    line (1-based number, text without the log's prefix or the crash report's "** "); else
    nothing."""
    began = next((i for i in range(len(lines) - 1, -1, -1) if _BOOT_BEGAN in lines[i]), None)
    if began is None or any(_BOOT_DONE in line for line in lines[began:]):
        return []
    crash = next((i for i in range(began, len(lines)) if _CRASH in lines[i]), None)
    if crash is None or crash + 1 >= len(lines):
        return []
    found = [(crash + 1 + 1, _clean(lines[crash + 1]).removeprefix("** "))]
    found += [(k + 1, _clean(lines[k])) for k in range(crash + 2, min(len(lines), crash + 4))
              if _clean(lines[k]).startswith("[{")]
    return found


def evidence_of(node: str, logs: Mapping[str, str]) -> list[dict[str, str]]:
    """Takes a node's name and its log files' texts by name. Returns each boot-failure line
    found (`boot_failure`), as {"at": "<node>/<file>:<line>", "text": ...}: the broker's own
    output first, then the other files by name."""
    order = [f for f in FIRST if f in logs] + sorted(f for f in logs if f not in FIRST)
    return [{"at": f"{node}/{name}:{n}", "text": text}
            for name in order for n, text in boot_failure(logs[name])]


def failure_since(before: Mapping[str, str], after: Mapping[str, str]) -> tuple[str, ...]:
    """Takes a node's log files' texts by name before a boot and after it. Returns the boot
    failure written in between: `boot_failure`'s lines, Erlang pids left out, from each file's
    part after what it held before (the whole file where the boot wrote it anew); empty when
    nothing written since names one. Two boots that failed alike give the same; a banner an
    earlier boot wrote is never taken for a new one."""
    new = {name: text[len(before[name]):] if name in before and text.startswith(before[name])
           else text for name, text in after.items()}
    return tuple(_PID.sub("<pid>", e["text"]) for e in evidence_of("", new))
