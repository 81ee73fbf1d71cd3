"""The clean intermediate process between servediff and model-written code (run as a script).

    python -I -S launcher.py '{"python": ..., "bootstrap": ..., "program": ..., ...}'

``suites.execution`` starts this file with an empty environment, so what the program can read as
its parent's environment (``/proc/<ppid>/environ``) holds nothing. It imports only the standard
library (``-I -S``: not servediff, not site-packages) and, on Linux:

- marks itself not dumpable, so the program cannot open its ``/proc`` files (memory, file
  descriptors) and forge the verdict this process prints;
- becomes a child subreaper, so whatever the program forks, even after ``setsid()`` and a double
  fork, is re-parented here rather than to init, and is killed before this process exits;
- asks the kernel for SIGTERM when servediff dies, and then still kills everything it started.

It hands the program a random token on a pipe; the bootstrap writes it back only when the program
has run to its end (after ``check(...)`` returned). ``sys.exit(0)`` or ``os._exit(0)`` inside the
program exits 0 without the token, which is then not a pass. It prints one JSON line: the exit
status, whether the wall-clock limit was reached, and whether the token came back.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
SWEEPS = 10_000  # a fork loop is killed one generation per sweep; it cannot outrun SIGKILL


def prctl(option: int, value: int) -> bool:
    """Linux's prctl(2) through libc; False where it does not exist (the sweep then relies on
    the program's process group only)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (AttributeError, OSError):
        return False


def children(me: int) -> list[int]:
    """Processes whose parent is ``me`` (orphans re-parented to a subreaper among them)."""
    found = []
    with contextlib.suppress(FileNotFoundError):  # no /proc: not Linux
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue  # it exited while we looked
            # The command name may contain spaces and parentheses: fields follow the last ')'.
            if int(stat.rsplit(b")", 1)[1].split()[1]) == me:
                found.append(int(name))
    return found


def sweep(child: subprocess.Popen[bytes]) -> None:
    """Kill the program's process group, then every process left below this one, until none is."""
    # The group id cannot be reused while any member lives, so this never hits a stranger.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    me = os.getpid()
    for _ in range(SWEEPS):
        for pid in children(me):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            # A killed child's own children are re-parented here before it can be reaped.
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def spawn(spec: dict[str, Any], token_fd: int, result_fd: int) -> subprocess.Popen[bytes]:
    argv = [spec["python"], "-I", "-c", spec["bootstrap"], *map(str, spec["limits"]),
            str(token_fd), str(result_fd), spec["program"]]  # fmt: skip
    with open(spec["stderr"], "wb") as err:
        return subprocess.Popen(
            argv,
            env={"PATH": os.defpath, "LANG": "C.UTF-8"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,  # a file the program's own size limit caps: no pipe to drain
            pass_fds=(token_fd, result_fd),
            start_new_session=True,
        )


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(3)  # servediff died: unwind through the sweep below


def main() -> None:
    spec = json.loads(sys.argv[1])
    parent = os.getppid()
    prctl(PR_SET_DUMPABLE, 0)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    signal.signal(signal.SIGTERM, _terminated)
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # servediff died before the request above took effect
        raise SystemExit(3)
    token = os.urandom(16).hex().encode()
    token_r, token_w = os.pipe()
    os.write(token_w, token)
    os.close(token_w)
    result_r, result_w = os.pipe()
    child = spawn(spec, token_r, result_w)
    os.close(token_r)
    os.close(result_w)
    status: int | None = None
    try:
        status = child.wait(timeout=spec["timeout_s"])
    except subprocess.TimeoutExpired:
        pass
    finally:
        sweep(child)
    back = os.read(result_r, 2 * len(token))  # every writer is dead: this cannot block
    print(json.dumps({"status": status, "finished": back == token}))


if __name__ == "__main__":
    main()
