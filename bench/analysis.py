"""Part 3: ``servediff compare`` on two synthetic run records of 100,000 items each.

    .venv/bin/python bench/main.py --parts analysis

The records are written with servediff's own writer (``records.item_line``): prompts and texts
of a few hundred characters, retokenized token ids, scored fields (answer, gold, correct), a
mix of identical and divergent texts (divergences at any position, some at character 0) and
a few engine errors. The compare process (read both, compare, statistics, Markdown report)
is timed from outside; its peak memory is its own maximum resident set (``wait4``).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from pathlib import Path

from common import PYTHON, Row, log, run_timed

from servediff.records import SuiteInfo, item_line, make_header, make_item
from servediff.suites.base import Score
from servediff.types import Completion, SamplingParams

PROSE = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no will "
    "more can what about up out them into only some time could these two may then do first any "
    "number answer step total each therefore because equals value function return list result "
    "model output token cache batch prompt compute first second third apples dollars minutes"
)
WORDS = PROSE.split()
DIVERGENT = 0.3  # share of items whose texts differ between the two configurations
ERRORS = 0.005  # share of items that failed on one side


@dataclass(frozen=True, slots=True)
class Config:
    items: int = 100_000
    seed: int = 0


def _text(rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(40, 90))).capitalize() + "."


def _tokens(text: str) -> list[int]:
    # Stand-in token ids: about one per 4 characters, like a BPE vocabulary of ~49k.
    return [hash(text[i : i + 4]) % 49152 for i in range(0, len(text), 4)]


def _pair(i: int, rng: random.Random) -> tuple[Completion, Completion, Score, Score, str]:
    prompt = f"Problem {i}: " + _text(rng)
    a_text = _text(rng)
    b_text = a_text
    if rng.random() < DIVERGENT:
        cut = 0 if rng.random() < 0.1 else rng.randrange(len(a_text))
        b_text = a_text[:cut] + _text(rng)[: len(a_text) - cut + rng.randint(-20, 20)]
    gold = rng.choice("ABCD")
    a_ans = gold if rng.random() < 0.6 else rng.choice("ABCD")
    b_ans = a_ans if b_text == a_text or rng.random() < 0.8 else rng.choice("ABCD")
    a = _completion(f"item-{i:06d}", a_text)
    b = _completion(f"item-{i:06d}", b_text)
    if rng.random() < ERRORS:
        b = Completion(item_id=b.item_id, error="HTTP 503: overloaded (after 5 attempts)", latency_s=1.0)
    return a, b, Score(a_ans, gold, a_ans == gold), Score(b_ans, gold, b_ans == gold), prompt


def _completion(item_id: str, text: str) -> Completion:
    ids = _tokens(text)
    return Completion(
        item_id=item_id,
        text=text,
        finish_reason="stop",
        latency_s=0.8,
        n_tokens=len(ids),
        token_ids=ids,
        token_source="retokenized",
    )


def write_records(cfg: Config, work: Path) -> tuple[Path, Path]:
    rng = random.Random(cfg.seed)
    ids = [f"item-{i:06d}" for i in range(cfg.items)]
    digest = hashlib.sha256("\n".join(ids).encode()).hexdigest()
    suite = SuiteInfo(
        name="synthetic", version="1", source="bench", data_sha256=digest, content_sha256=digest, item_ids=ids
    )
    paths = (work / "stock.jsonl", work / "tuned.jsonl")
    files = [p.open("w", encoding="utf-8") for p in paths]
    for f, label in zip(files, ("stock", "tuned")):
        engine = {"kind": "http", "label": label, "model": "SmolLM2-135M-Instruct", "base_url": "http://x"}
        header = make_header(
            label=label, repeat=1, engine=engine, sampling=SamplingParams(), suite=suite, concurrency=64
        )
        f.write(header.model_dump_json() + "\n")
    for i in range(cfg.items):
        a, b, sa, sb, prompt = _pair(i, rng)
        messages = [{"role": "user", "content": prompt}]
        files[0].write(item_line(make_item(a, messages, sa, {})))
        files[1].write(item_line(make_item(b, messages, sb if b.error is None else None, {})))
    for f in files:
        f.close()
    return paths


def measure(cfg: Config, work: Path) -> list[Row]:
    log(f"analysis: writing two records of {cfg.items:,} items")
    a, b = write_records(cfg, work)
    size = (a.stat().st_size + b.stat().st_size) / 2 / 2**20
    argv = [PYTHON, "-m", "servediff", "compare", str(a), str(b), "--md", str(work / "report.md")]
    timed = run_timed(argv)
    report_kib = (work / "report.md").stat().st_size / 1024
    part = f"3. compare 2 × {cfg.items:,} items"
    secs, cpu, mib = timed.seconds, timed.cpu_s, timed.max_rss_mib
    return [
        Row(part, f"records: {size:,.0f} MiB each; Markdown report {report_kib:,.0f} KiB", ""),
        Row(
            part, "`servediff compare` wall time (read, compare, report)", f"{secs:.1f} s", "≤ 5 s", secs <= 5
        ),
        Row(
            part,
            "`servediff compare` CPU time (wall time on an idle machine)",
            f"{cpu:.1f} s",
            "≤ 5 s",
            cpu <= 5,
        ),
        Row(part, "`servediff compare` peak memory (max RSS)", f"{mib:,.0f} MiB", "≤ 1 GiB", mib <= 1024),
    ]
