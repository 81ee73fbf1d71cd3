"""Running model-written code: one Python program in a child process, with limits.

    servediff run --suite humaneval --allow-code-execution --temperature 0.7 --samples 8 --out he.jsonl

The HumanEval suite scores a completion by running the tests that come with the item. The code
is the model's, so it runs in a separate interpreter (``python -I``: no user site-packages, no
``PYTHON*`` variables) in an empty temporary folder, started not by servediff but by a clean
intermediate process (``suites.launcher``, itself started with an empty environment), and a
bootstrap that sets, inside the child, before the program runs:

- ``RLIMIT_AS``: the address space (a runaway allocation ends in MemoryError, not in swapping);
- ``RLIMIT_CPU``: CPU seconds (a busy loop is killed by the kernel even if the parent is gone). The
  hard limit is one second above the soft one: at equal limits Linux sends SIGKILL, not SIGXCPU,
  and the reason would read as an unexplained kill; a program that catches SIGXCPU still meets
  the hard limit a second later;
- ``RLIMIT_FSIZE``: the largest file it may write, its error output among them (a flood of
  stderr stops at that size; servediff reads only the last few kilobytes);
- ``RLIMIT_CORE`` 0: no core dumps.

Only a program that runs to its end passes: the bootstrap writes back a random per-run token
after ``check(...)`` has returned, so ``sys.exit(0)`` or ``os._exit(0)`` before the tests is a
failure. The launcher waits at most ``timeout`` seconds of wall time (a program that sleeps uses
no CPU), then kills the program's process group and, as a child subreaper, every process the
program left behind, ``setsid()`` and double forks included, before it returns.

What the program can read: its own (emptied) environment, the launcher's (empty) one, and
anything this user may read, files and other processes alike. servediff and the launcher mark
themselves not dumpable while code runs, and the bootstrap drops every capability (so even
as root the program holds no ``CAP_SYS_PTRACE``), so servediff's ``/proc/<pid>/environ``, where
API keys live, is closed to the program. Processes servediff did not start (the shell that
started it, say) are not closed, so a secret in their environment is readable. What is NOT
enforced: network access, and writes to anything this user may touch. This is a guard against
accidents (loops, allocations, crashes, stray exits), not a sandbox; the suite runs only when the
user explicitly allows it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

TIMEOUT_S = 10.0  # wall seconds; HumanEval's tests take well under 1 s when the code is right
MEMORY_BYTES = 1 << 30  # address space: an interpreter and its tests need about 30 MB
FILE_BYTES = 1 << 20
REASON_CHARS = 200
TAIL_BYTES = 4096  # of the error output: its last line is the reason
GRACE_S = 10.0  # for the launcher to start, sweep and report after the program's own limit
LAUNCHER = Path(__file__).with_name("launcher.py")
PR_SET_DUMPABLE = 4

# Runs in the child: limits first, then the program, as __main__; then, only if the program
# returned, the token back to the launcher (sys.exit and os._exit never come back here).
_BOOTSTRAP = """\
import os, resource, sys
mem, cpu, fsize, token_fd, result_fd = (int(a) for a in sys.argv[1:6])
resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
try:  # Linux: no capabilities, now or after an exec, so root too is held by "not dumpable"
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    libc.prctl(28, 0x0F, 0, 0, 0)  # PR_SET_SECUREBITS: NOROOT, NO_SETUID_FIXUP, both locked
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    libc.capset(header, (ctypes.c_uint32 * 6)())  # effective, permitted, inheritable: none
    del ctypes, libc, header
except (ImportError, AttributeError, OSError):
    pass
path = sys.argv[6]
with open(path, encoding="utf-8") as f:
    source = f.read()
del sys.argv[:]
exec(compile(source, path, "exec"), {"__name__": "__main__"})
os.write(result_fd, os.read(token_fd, 64))
"""


@dataclass(frozen=True, slots=True)
class Limits:
    timeout_s: float = TIMEOUT_S
    memory_bytes: int = MEMORY_BYTES
    file_bytes: int = FILE_BYTES


@dataclass(frozen=True, slots=True)
class Outcome:
    """Did the program run to its end and exit 0, and if not, why (the last line of its error
    output, or the limit)."""

    passed: bool
    reason: str  # "passed", "failed: AssertionError", "timed out after 10 s", ...


DEFAULT_LIMITS = Limits()


def run_program(source: str, limits: Limits = DEFAULT_LIMITS) -> Outcome:
    """Run ``source`` as a Python program under ``limits``; running to its end, exit status 0,
    is a pass."""
    _close_own_proc_files()
    with tempfile.TemporaryDirectory(prefix="servediff-exec-") as folder:
        program = Path(folder) / "program.py"
        program.write_text(source, encoding="utf-8")
        stderr = Path(folder) / "stderr"
        cpu = max(1, int(limits.timeout_s + 0.999))
        spec = {"python": sys.executable, "bootstrap": _BOOTSTRAP, "program": str(program),
                "stderr": str(stderr), "timeout_s": limits.timeout_s,
                "limits": [limits.memory_bytes, cpu, limits.file_bytes]}  # fmt: skip
        # An empty environment: the launcher is the program's parent, and what a parent holds
        # in its environment the program can read.
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(LAUNCHER), json.dumps(spec)],
            cwd=folder,
            env={},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=limits.timeout_s + GRACE_S)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            proc.communicate()
            return Outcome(False, f"timed out after {limits.timeout_s:g} s")
        verdict = _verdict(proc.returncode, out, err)
        return _outcome(verdict, _tail(stderr), limits)


def _close_own_proc_files() -> None:
    # Not dumpable: /proc/<our pid>/environ, mem and fd become root's, closed to the program
    # (it runs as this user). Left so for the rest of the process, since scoring may run in
    # several threads at once. Linux only; elsewhere there is no /proc to read.
    with contextlib.suppress(AttributeError, OSError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def _verdict(status: int, out: bytes, err: bytes) -> dict[str, object]:
    try:
        verdict = json.loads(out)
    except ValueError:
        verdict = None
    if status != 0 or not isinstance(verdict, dict):
        # The launcher is ours: its failure is an error of this machine, not a wrong answer.
        detail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {status}"]
        raise RuntimeError(f"code execution launcher failed: {detail[0][:REASON_CHARS]}")
    return verdict


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - TAIL_BYTES))
            return f.read(TAIL_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""  # the program removed it: no reason to give beyond its status


def _kill_group(pid: int) -> None:
    # Only before the child is reaped: until then its pid, the group's id, cannot be reused.
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is already gone
        os.killpg(pid, signal.SIGKILL)


def _outcome(verdict: dict[str, object], err: str, limits: Limits) -> Outcome:
    status = verdict.get("status")
    if not isinstance(status, int):
        return Outcome(False, f"timed out after {limits.timeout_s:g} s")
    if status == 0:
        if verdict.get("finished") is True:
            return Outcome(True, "passed")
        return Outcome(False, "failed: exited before its tests finished")
    if status == -signal.SIGXCPU:
        return Outcome(False, "CPU time limit reached")
    if status < 0:
        return Outcome(False, f"killed by signal {signal.Signals(-status).name}")
    lines = [line.strip() for line in err.splitlines() if line.strip()]
    last = lines[-1] if lines else f"exit status {status}"
    return Outcome(False, f"failed: {last[:REASON_CHARS]}")
