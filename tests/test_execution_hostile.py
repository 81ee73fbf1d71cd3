"""Model-written code that tries to pass without passing, outlive the scoring, flood servediff's
memory or read its secrets, each run as a real completion through the real runner."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servediff.suites.execution import Limits, run_program
from servediff.suites.humaneval import check, default_path, problems

FIRST = problems(default_path())[0]
SHORT = Limits(timeout_s=3)


EXITS = ["import sys\nsys.exit(0)", "import os\nos._exit(0)", "raise SystemExit", "exit()"]


@pytest.mark.parametrize("exit_call", EXITS)
def test_exiting_before_the_tests_is_not_a_pass(exit_call: str) -> None:
    # A completion that leaves with status 0 before check(...) runs: a failure, whatever the status.
    score = check(FIRST, f"```python\n{exit_call}\n```", SHORT)
    assert (score.correct, score.answer) == (False, "failed: exited before its tests finished")
    right = check(FIRST, FIRST.canonical_solution, SHORT)
    assert (right.correct, right.answer) == (True, "passed")  # the token comes back when it should


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="the subreaper sweep is Linux's")
def test_a_setsid_grandchild_does_not_survive_the_scoring(tmp_path: Path) -> None:
    late, pids = tmp_path / "written-later", tmp_path / "pids"
    escape = f"""
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:  # a daemon: new session, parent gone, re-parented away from the program
        open({str(pids)!r}, "w").write(str(os.getpid()))
        time.sleep(2)
        open({str(late)!r}, "w").write("still here")
    os._exit(0)
time.sleep(0.5)
"""
    outcome = run_program(escape, SHORT)
    assert outcome == type(outcome)(True, "passed")  # it ran to its end
    pid = int(pids.read_text())
    assert not _alive(pid), "the grandchild outlived the scoring"
    time.sleep(3)
    assert not late.exists()


def test_a_flood_of_error_output_is_bounded() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    flood = "import sys\nwhile True:\n    sys.stderr.write('x' * 65536)\n"
    outcome = run_program(flood, Limits(timeout_s=3))
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert not outcome.passed and len(outcome.reason) <= 220
    assert grown_mb < 20, f"servediff grew by {grown_mb:.0f} MB reading the program's stderr"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="/proc/<pid>/environ is Linux's")
def test_the_program_cannot_read_a_secret_from_its_ancestors(tmp_path: Path) -> None:
    # The secret is in servediff's initial environment (what /proc/<pid>/environ shows), so it
    # runs in a process of its own; the program walks up its ancestors and reads each one.
    seen = tmp_path / "seen"
    snoop = f"""
import os
found, pid = [], os.getppid()
while pid > 1:
    try:
        found.append(open(f"/proc/{{pid}}/environ", "rb").read())
    except OSError as exc:
        found.append(type(exc).__name__.encode())
    pid = int(open(f"/proc/{{pid}}/stat", "rb").read().rsplit(b")", 1)[1].split()[1])
open({str(seen)!r}, "wb").write(b"|".join(found))
"""
    script = f"from servediff.suites.execution import run_program\nprint(run_program({snoop!r}))\n"
    env = {**os.environ, "SERVEDIFF_TEST_SECRET": "sk-do-not-leak-4711"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=60)
    assert b"passed" in done.stdout, done.stderr.decode()[-2000:]
    read = seen.read_bytes()
    assert read, "the program read nothing: the test proves nothing"
    assert b"sk-do-not-leak-4711" not in read
