"""Kill ``servediff run`` with SIGKILL at random points, resume it, and count what was lost.

Used by tests/test_kill_resume.py (a few kills) and runnable on its own for a larger campaign:

    python -m tests.helpers.kills --kills 25

which starts its own llama.cpp server (SmolLM2, 1 thread), kills the CLI at random moments
(mostly just after an item line lands, sometimes at a random time, start-up included), re-runs
the same command until it finishes, and prints kills / items lost / items doubled.

The runner writes each line with its newline in one call, so a SIGKILL alone leaves whole lines.
A write the kernel had only partly done when the machine stopped (or a large line written in
several calls) leaves any byte-prefix of the file; so after three kills in four the campaign cuts
the file inside its last line to such a prefix, in turn: just the final newline, inside a
multi-byte character (every prompt has some, echoed into its line), anywhere in the line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servediff.records import read_run

SRC = Path(__file__).resolve().parents[2] / "src"

# What is left of the last line after a kill, in turn (None: the line as the kill left it).
TAILS = (None, "newline", "character", "anywhere")

PROMPTS = [
    "Say « café » in one word.",
    "What is 5 € in ¥?",
    "Translate ありがとう.",
    "Name a city with an ü in it.",
    "Write “hello” in Greek: Γειά.",
    "What does the emoji 😀 mean?",
    "Spell naïve without the diaeresis.",
    "Is 3 × 4 = 12?",
]


def unicode_suite(folder: Path) -> Path:
    path = folder / "unicode.jsonl"
    rows = [{"id": f"u{k}", "messages": [{"role": "user", "content": p}]} for k, p in enumerate(PROMPTS)]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@dataclass(frozen=True, slots=True)
class Job:
    """One ``servediff run --engine http`` command: the same argv on every attempt."""

    base_url: str
    out: Path
    limit: int = 8
    max_tokens: int = 8
    concurrency: int = 2
    suite: str = "prompts"
    data: Path | None = None
    retries: int = 0

    def argv(self) -> list[str]:
        argv = [sys.executable, "-m", "servediff", "run", "--engine", "http", "--base-url", self.base_url]
        argv += ["--suite", self.suite, "--limit", str(self.limit), "--max-tokens", str(self.max_tokens)]
        argv += ["--concurrency", str(self.concurrency), "--retries", str(self.retries), "--timeout", "60"]
        argv += ["--label", "kill", "--out", str(self.out), "--no-progress"]
        return argv + (["--data", str(self.data)] if self.data else [])


@dataclass
class Tally:
    kills: int = 0
    cuts: int = 0  # kills followed by a partial last line (see the module docstring)
    attempts: int = 0
    lost: int = 0  # suite items missing or not finished in the final record
    doubled: int = 0  # items with more than one finished line
    extra: int = 0  # items the reference run does not have
    records: int = 0
    warnings: list[str] = field(default_factory=list)


def env() -> dict[str, str]:
    # The subprocess must import this checkout's servediff, whatever is installed.
    return {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def lines_in(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def attempt(job: Job, rng: random.Random, tally: Tally, kill: bool) -> int | None:
    """Run the command once; with ``kill``, SIGKILL it at a random point. Its exit code, or None
    when it was killed."""
    proc = subprocess.Popen(job.argv(), env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    tally.attempts += 1
    if kill:
        if rng.random() < 0.3:  # anywhere, interpreter start-up and engine discovery included
            deadline = time.monotonic() + rng.uniform(0.0, 3.0)
            target = 1 << 30
        else:  # just after the n-th line lands: the write boundary itself
            deadline = time.monotonic() + 60.0
            target = lines_in(job.out) + rng.randint(1, 3)
        while proc.poll() is None and time.monotonic() < deadline and lines_in(job.out) < target:
            time.sleep(0.005)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            tally.kills += 1
            if cut_last_line(job.out, TAILS[tally.kills % len(TAILS)], rng):
                tally.cuts += 1
    _, err = proc.communicate(timeout=300)
    tally.warnings += [w for w in err.decode(errors="replace").splitlines() if w.startswith("warning")]
    return None if proc.returncode == -signal.SIGKILL else proc.returncode


def cut_last_line(path: Path, tail: str | None, rng: random.Random) -> bool:
    """Leave a prefix of the file that ends inside its last line: a write only partly done."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return False
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    if tail is None or len(data) - last < 2:
        return False
    if tail == "newline":
        keep = len(data) - 1
    elif tail == "character":  # one byte past a UTF-8 lead byte
        leads = [i for i in range(last, len(data)) if data[i] >= 0xC0]
        if not leads:
            return False
        keep = rng.choice(leads) + 1
    else:
        keep = rng.randrange(last + 1, len(data) - 1)
    path.write_bytes(data[:keep])
    return True


def finish(job: Job, expected: list[str], tally: Tally) -> None:
    """Run once more without a kill; count lost and doubled items in the final record."""
    rc = attempt(job, random.Random(0), tally, kill=False)
    if rc != 0:
        raise RuntimeError(f"the uninterrupted re-run exited {rc}")
    audit(job.out, expected, tally)


def audit(path: Path, expected: list[str], tally: Tally) -> None:
    run = read_run(path)
    rows = [json.loads(line) for line in path.read_bytes().splitlines()[1:] if line.strip()]
    finished = Counter(r["id"] for r in rows if r["error"] is None)
    tally.lost += len(set(expected) - run.done_ids())
    tally.extra += len(set(run.items) - set(expected))
    tally.doubled += sum(1 for n in finished.values() if n > 1)
    tally.records += 1
    if any("record" in r for r in rows):
        raise AssertionError(f"{path}: a second header line")


def campaign(base_url: str, folder: Path, kills: int, seed: int, expected: list[str], **job: Any) -> Tally:
    """``kills`` SIGKILLs spread over as many records as they take, each record finished after."""
    rng, tally, n = random.Random(seed), Tally(), 0
    while tally.kills < kills:
        n += 1
        j = Job(base_url, folder / f"r{n}.jsonl", **job)
        for _ in range(rng.randint(1, 4)):  # a few kills into this record
            if attempt(j, rng, tally, kill=True) == 0 and read_run(j.out).done_ids() >= set(expected):
                break
        finish(j, expected, tally)
    return tally


def main() -> None:
    from tests.conftest import LlamaServer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=25)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--limit", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        server = LlamaServer(["--n_threads", "1"], folder / "server.log")
        try:
            job = {"limit": args.limit, "concurrency": args.concurrency, "data": unicode_suite(folder)}
            ref = Job(server.base_url, folder / "reference.jsonl", **job)
            subprocess.run(ref.argv(), env=env(), check=True, capture_output=True)
            expected = sorted(read_run(ref.out).done_ids())
            t0 = time.monotonic()
            tally = campaign(
                server.base_url,
                folder,
                args.kills,
                args.seed,
                expected,
                **job,
            )
        finally:
            server.stop()
    print(
        f"kills: {tally.kills}  attempts: {tally.attempts}  records: {tally.records}x{len(expected)} items  "
        f"cut tails: {tally.cuts}  lost: {tally.lost}  doubled: {tally.doubled}  "
        f"extra: {tally.extra}  torn-line warnings: {len(tally.warnings)}  ({time.monotonic() - t0:.0f} s)"
    )


if __name__ == "__main__":
    main()
