"""What an experiment has started and not yet stopped: one small file per launched server in the
experiment's output folder (``servers/<pid>.json``), so the next run can end what a killed one
left behind.

    servediff experiment examples/llamacpp-flash.toml

A run that ends normally, by an error or by Ctrl-C stops its servers and removes their files. A
run killed by SIGKILL cannot; on Linux the kernel ends each server with it (``PR_SET_PDEATHSIG``,
see ``lifecycle``), but that covers only the server's own process, not workers it forked, and
not other systems. So ``end_survivors``, called before an experiment starts anything, ends the
process group of every server still listed.

A pid alone could name another process by now: each entry keeps the server's start time (field
22 of ``/proc/<pid>/stat``, clock ticks since boot). A live process with that pid and another
start time is someone else's, and nothing is signalled; with the right start time, or with the
leader gone, the members of its process group are the server's (Linux hands out no pid that is
still a group's id). Where there is no ``/proc`` nothing is signalled;
the survivor is named on stderr instead.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

GRACE_S = 10.0  # between SIGTERM and SIGKILL, as for a server stopped in order
POLL_S = 0.1


@dataclass(frozen=True, slots=True)
class Entry:
    pid: int  # also its process group: servers start in a session of their own
    port: int
    label: str
    started: int | None  # clock ticks since boot (/proc/<pid>/stat field 22); None: unknown


def start_time(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot; None when it is gone (or no /proc)."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None


def _stat(pid: int) -> list[str] | None:
    # Fields after the command name, which may hold spaces and ')': field 3 (state) is index 0.
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    return text.rsplit(")", 1)[1].split()


def enter(folder: Path, pid: int, port: int, label: str) -> Path:
    """Note a server just started; returns its file, for ``leave``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{pid}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(Entry(pid, port, label, start_time(pid)))))
    tmp.replace(path)  # whole or absent: a kill mid-write leaves no half entry
    return path


def leave(path: Path) -> None:
    path.unlink(missing_ok=True)


def end_survivors(folder: Path) -> list[str]:
    """End the servers a previous run left running; one line per entry that was still alive."""
    said = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        entry = _read(path)
        if entry is not None:
            members = _members(entry)
            if members:
                _end(members)
                said.append(
                    f"stopped {len(members)} process(es) of server {entry.label!r} (pid {entry.pid}, "
                    f"port {entry.port}) left running by an earlier run that was killed"
                )
            elif entry.started is None and start_time(entry.pid) is not None:
                said.append(f"server {entry.label!r} of an earlier run may still run as pid {entry.pid}")
        path.unlink(missing_ok=True)
    return said


def _read(path: Path) -> Entry | None:
    try:
        raw = json.loads(path.read_text())
        return Entry(int(raw["pid"]), int(raw["port"]), str(raw["label"]), raw["started"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # a file that is not ours to trust: signal nothing


def _members(entry: Entry) -> list[int]:
    """Live processes in the server's process group, if that group is still the server's."""
    if entry.started is None:
        return []
    leader = start_time(entry.pid)
    if leader is not None and leader != entry.started:
        return []  # the pid names another process now: the server and its group are gone
    # With the leader gone its group id cannot have been handed out again while members live.
    found = []
    for name in os.listdir("/proc"):
        fields = _stat(int(name)) if name.isdigit() else None
        # state and pgrp are indices 0 and 2 (fields 3 and 5)
        if fields and fields[0] != "Z" and int(fields[2]) == entry.pid:
            found.append(int(name))
    return found


def _end(pids: list[int]) -> None:
    """SIGTERM, then SIGKILL to whatever is left after the grace period."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(POLL_S)


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"
