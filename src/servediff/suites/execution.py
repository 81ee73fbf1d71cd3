"""Running model-written code: one Python program in a child process, with limits.

    servediff run --suite humaneval --allow-code-execution --temperature 0.7 --samples 8 --out he.jsonl

The HumanEval suite scores a completion by running the tests that come with the item. The code
is the model's, so it runs in a separate interpreter (``python -I``: no user site-packages, no
``PYTHON*`` variables) in an empty temporary folder, with an emptied environment, and a
bootstrap that sets, inside the child, before the program runs:

- ``RLIMIT_AS``: the address space (a runaway allocation ends in MemoryError, not in swapping);
- ``RLIMIT_CPU``: CPU seconds (a busy loop is killed by the kernel even if the parent is gone);
- ``RLIMIT_FSIZE``: the largest file it may write;
- ``RLIMIT_CORE`` 0: no core dumps.

The parent also waits at most ``timeout`` seconds of wall time (a program that sleeps uses no
CPU) and then kills the child's whole process group. What is NOT enforced: network access, and
reads or writes of anything this user may touch. This is a guard against accidents (loops,
allocations, crashes), not a sandbox; the suite runs only when the user explicitly allows it.
"""

from __future__ import annotations

import contextlib
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

# Runs in the child: limits first, then the program, as __main__. Its exit status is the verdict.
_BOOTSTRAP = """\
import resource, sys
mem, cpu, fsize = (int(a) for a in sys.argv[1:4])
resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
path = sys.argv[4]
with open(path, encoding="utf-8") as f:
    source = f.read()
del sys.argv[:]
exec(compile(source, path, "exec"), {"__name__": "__main__"})
"""


@dataclass(frozen=True, slots=True)
class Limits:
    timeout_s: float = TIMEOUT_S
    memory_bytes: int = MEMORY_BYTES
    file_bytes: int = FILE_BYTES


@dataclass(frozen=True, slots=True)
class Outcome:
    """Did the program exit 0, and if not, why (the last line of its error output, or the limit)."""

    passed: bool
    reason: str  # "passed", "failed: AssertionError", "timed out after 10 s", ...


DEFAULT_LIMITS = Limits()


def run_program(source: str, limits: Limits = DEFAULT_LIMITS) -> Outcome:
    """Run ``source`` as a Python program under ``limits``; exit status 0 is a pass."""
    with tempfile.TemporaryDirectory(prefix="servediff-exec-") as folder:
        program = Path(folder) / "program.py"
        program.write_text(source, encoding="utf-8")
        cpu = max(1, int(limits.timeout_s + 0.999))
        argv = [sys.executable, "-I", "-c", _BOOTSTRAP, str(limits.memory_bytes), str(cpu),
                str(limits.file_bytes), str(program)]  # fmt: skip
        # A new session: on timeout the whole group goes, including anything the program forked.
        proc = subprocess.Popen(
            argv,
            cwd=folder,
            env={"PATH": os.defpath, "LANG": "C.UTF-8"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            _, err = proc.communicate(timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            proc.communicate()
            return Outcome(False, f"timed out after {limits.timeout_s:g} s")
    return _outcome(proc.returncode, err.decode("utf-8", "replace"))


def _kill_group(pid: int) -> None:
    # Only before the child is reaped: until then its pid, the group's id, cannot be reused.
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is already gone
        os.killpg(pid, signal.SIGKILL)


def _outcome(status: int, err: str) -> Outcome:
    if status == 0:
        return Outcome(True, "passed")
    if status == -signal.SIGXCPU:
        return Outcome(False, "CPU time limit reached")
    if status < 0:
        return Outcome(False, f"killed by signal {signal.Signals(-status).name}")
    lines = [line.strip() for line in err.splitlines() if line.strip()]
    last = lines[-1] if lines else f"exit status {status}"
    return Outcome(False, f"failed: {last[:REASON_CHARS]}")
