"""HumanEval: the dataset's own solutions pass, wrong code fails with its reason, a loop is
stopped at the time limit and scored failed (not errored), the suite is refused without
``--allow-code-execution``, and a real sampled run on the embedded engine is scored draw by draw."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from servediff.cli import main
from servediff.suites import SuiteOptions, load_suite
from servediff.suites.execution import Limits, run_program
from servediff.suites.humaneval import REFUSAL, code_of, default_path, problems

PROBLEMS = {p.task_id: p for p in problems(default_path())[:10]}
FIRST = PROBLEMS["HumanEval/0"]
SHORT = Limits(timeout_s=3)


def fenced(code: str) -> str:
    return f"Here is the function:\n\n```python\n{code}```\n\nIt compares every pair."


@pytest.mark.parametrize("task", sorted(PROBLEMS))
def test_the_canonical_solution_passes(task: str) -> None:
    from servediff.suites.humaneval import check

    problem = PROBLEMS[task]
    score = check(problem, problem.canonical_solution, SHORT)
    assert (score.correct, score.answer) == (True, "passed")


def test_a_full_definition_in_a_chat_reply_replaces_the_stub() -> None:
    from servediff.suites.humaneval import check

    whole = FIRST.prompt + FIRST.canonical_solution
    assert check(FIRST, fenced(whole), SHORT).correct


def test_a_wrong_solution_fails_with_its_reason() -> None:
    from servediff.suites.humaneval import check

    wrong = f"def {FIRST.entry_point}(numbers, threshold):\n    return False\n"
    score = check(FIRST, fenced(wrong), SHORT)
    assert not score.correct and score.answer == "failed: AssertionError"
    broken = check(FIRST, "I cannot write this function.", SHORT)  # prose is not Python
    assert not broken.correct and broken.answer is not None and "SyntaxError" in broken.answer


def test_an_infinite_loop_is_stopped_and_scored_failed() -> None:
    from servediff.suites.humaneval import check

    loop = f"def {FIRST.entry_point}(numbers, threshold):\n    while True:\n        pass\n"
    score = check(FIRST, fenced(loop), Limits(timeout_s=2))
    assert not score.correct
    # the wall-clock timeout or the CPU limit, whichever the shared machine reaches first
    assert score.answer in ("timed out after 2 s", "CPU time limit reached")


def test_the_cpu_limit_is_named_as_such() -> None:
    # Six threads hashing outside the GIL spend CPU seconds faster than wall seconds, so the
    # kernel's CPU limit comes before the wall-clock one. With the hard limit equal to the soft one
    # Linux sent SIGKILL, and the reason read "killed by signal SIGKILL" (a CI run saw it).
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: CPU time cannot outrun wall time")
    burn = (
        "import hashlib, threading\n"
        "data = b'x' * (1 << 20)\n"
        "def burn():\n"
        "    while True:\n"
        "        hashlib.sha256(data).digest()\n"
        "for _ in range(5):\n"
        "    threading.Thread(target=burn, daemon=True).start()\n"
        "burn()\n"
    )
    assert run_program(burn, Limits(timeout_s=6)).reason == "CPU time limit reached"
    # A program that catches SIGXCPU meets the hard limit a second later.
    caught = "import signal\nsignal.signal(signal.SIGXCPU, lambda *a: None)\n" + burn
    assert run_program(caught, Limits(timeout_s=6)).reason == "killed by signal SIGKILL"


def test_a_sleeping_program_is_stopped_at_the_wall_clock_limit() -> None:
    outcome = run_program("import time\ntime.sleep(60)\n", Limits(timeout_s=1))
    assert (outcome.passed, outcome.reason) == (False, "timed out after 1 s")


def test_memory_is_limited_in_the_child() -> None:
    outcome = run_program("x = bytearray(2 << 30)\n", Limits(timeout_s=10, memory_bytes=512 << 20))
    assert (outcome.passed, outcome.reason) == (False, "failed: MemoryError")


def test_code_of_takes_the_first_fenced_block() -> None:
    assert code_of("```python\na = 1\n```\n```python\nb = 2\n```") == "a = 1\n"
    assert code_of("```\na = 1\n") == "a = 1\n"  # a reply cut off at max_tokens
    assert code_of("    return 1\n") == "    return 1\n"


def test_without_the_flag_the_suite_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "he.jsonl"
    args = ["run", "--engine", "llamacpp", "--suite", "humaneval", "--limit", "2", "--out", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err == f"error: {REFUSAL}\n" and "--allow-code-execution" in err
    assert not out.exists()
    with pytest.raises(ValueError, match="allow-code-execution"):
        load_suite("humaneval")
    assert len(load_suite("humaneval", SuiteOptions(allow_code_execution=True)).samples) == 164


def test_a_sampled_run_on_the_embedded_engine_is_scored(tmp_path: Path) -> None:
    out = tmp_path / "he.jsonl"
    args = ["run", "--engine", "llamacpp", "--threads", "1", "--suite", "humaneval", "--limit", "2"]
    args += ["--temperature", "0.7", "--samples", "2", "--max-tokens", "200", "--allow-code-execution"]
    assert main([*args, "--no-progress", "--out", str(out)]) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()[1:]]
    assert sorted(x["id"] for x in lines) == [f"HumanEval/{i}#{s}" for i in (0, 1) for s in (0, 1)]
    for x in lines:  # every draw generated and scored: right or wrong, with the reason recorded
        assert x["error"] is None and isinstance(x["correct"], bool)
        assert x["answer"] == "passed" if x["correct"] else x["answer"].startswith(("failed", "timed out"))
