"""Reference studies: record files whose summary.json is kept beside them, so that a change to how
the report is built can be checked to leave every number where it was.

    python scripts/reference_summaries.py        # re-runs the small studies, rewrites the summaries

Each study names its record files (a folder under ``tests/data/reference`` or a committed study's
tarball under ``docs/``) and the options the report was built with; ``summary_of`` builds its
summary.json the way ``servediff compare --json`` / ``servediff experiment`` do.
"""

from __future__ import annotations

import copy
import math
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servediff.compare.loader import load
from servediff.compare.study import pairs_with
from servediff.report import render
from servediff.report.assembly import build

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "tests" / "data" / "reference"


@dataclass(frozen=True, slots=True)
class ReferenceStudy:
    name: str
    source: str  # a folder under tests/data/reference, or a tarball under docs/
    globs: tuple[str, ...] = ("**/*.jsonl",)
    title: str = "servediff report"
    checkpoints: bool = False
    control: str | None = None  # experiments with pairs = "control": pairs with this label only
    ordered: bool = False  # files in the globs' order (else sorted by path)
    also: tuple[str, ...] = ()  # more tarballs under docs/, unpacked beside ``source``'s records

    @property
    def summary_path(self) -> Path:
        return REFERENCE / f"{self.name}.summary.json"

    def files(self, scratch: Path) -> list[Path]:
        """The study's record files (a tarball is unpacked into ``scratch`` first)."""
        folder = ROOT / self.source
        if self.source.endswith((".tar.gz", ".tar.xz")):
            folder = scratch / self.name
            if not folder.exists():
                for source in (self.source, *self.also):
                    with tarfile.open(ROOT / source) as tar:
                        tar.extractall(folder, filter="data")
        if self.ordered:  # the globs' order is the study's: its first configuration is the reference
            return list(dict.fromkeys(p for g in self.globs for p in sorted(folder.glob(g))))
        return sorted({p for g in self.globs for p in folder.glob(g)})


STUDIES = (
    # A small hand-built study (tests/report_fixtures.py): divergences, scores, subjects, markup.
    ReferenceStudy("constructed", "tests/data/reference/constructed"),
    # The demo's experiment (examples/embedded.toml) with small limits: embedded llama.cpp, probes.
    ReferenceStudy("demo", "tests/data/reference/demo", title="demo (reduced)"),
    # examples/embedded-sampled.toml with small limits: k draws per item, seeds, pass rates.
    ReferenceStudy("sampled", "tests/data/reference/sampled", title="sampled (reduced)"),
    # `servediff gate` records (stock against tuned, one-digit sums) compared as runs.
    ReferenceStudy("gate", "tests/data/reference/gate", ("stock.gsm8k.jsonl", "tuned.gsm8k.jsonl")),
    # The committed GPU studies.
    ReferenceStudy("gpu-full", "docs/studies/gpu-h200/study-full.tar.gz", ("runs/*.jsonl",)),
    ReferenceStudy("gpu-throughput", "docs/studies/gpu-h200/study-throughput.tar.gz", ("runs/*.jsonl",)),
    ReferenceStudy("gpu-factors", "docs/studies/gpu-h200/factors.tar.gz", ("runs/*/*.jsonl",)),
    ReferenceStudy(
        "gpu-kl",
        "docs/studies/gpu-h200-kl/study.tar.gz",
        ("gpu-kl/runs/score-on-policy/*.jsonl", "gpu-kl/runs/score-gsm8k/*.jsonl"),
    ),
    # docs/studies/qwen-gpu.md: Qwen2.5-Coder-1.5B stock vs tuned vs a 0.5B draft (probed), and GSM8K paired.
    ReferenceStudy(
        "qwen-gpu-tuned",
        "docs/studies/qwen-gpu/study.tar.xz",
        (
            "tuned/runs/stock*/*.jsonl",
            "tuned/runs/tuned*/*.jsonl",
            "tuned/runs/draft*/*.jsonl",
            "tuned/probes/*.jsonl",
        ),
        title="Qwen2.5-Coder-1.5B on llama-server (CUDA): stock vs flash attention + KV q8_0 + prompt cache"
        " vs a 0.5B draft",
        ordered=True,
    ),
    ReferenceStudy(
        "qwen-gpu-gsm8k",
        "docs/studies/qwen-gpu/study.tar.xz",
        ("gsm8k/stock.r1.jsonl", "gsm8k/tuned.r1.jsonl"),
        title="Qwen2.5-Coder-1.5B on llama-server (CUDA), GSM8K: stock vs flash attention + KV q8_0"
        " + prompt cache",
        ordered=True,
    ),
    # docs/studies/vllm-h200.md: Qwen2.5-Coder-1.5B on vLLM 0.24.0, stock vs n-gram speculation +
    # prefix caching vs FP8, every divergence probed through vLLM.
    ReferenceStudy(
        "vllm-h200-seed",
        "docs/studies/vllm-h200/seed.tar.xz",
        (
            "seed/runs/stock*/*.jsonl",
            "seed/runs/ngram*/*.jsonl",
            "seed/runs/fp8*/*.jsonl",
            "seed/probes/*.jsonl",
        ),
        title="Qwen2.5-Coder-1.5B on vLLM 0.24.0 (H200): stock vs prefix caching + n-gram speculation vs FP8",
        ordered=True,
    ),
    # docs/studies/vllm-h200.md, second session: FP8 against bf16 teacher-forced through vLLM's
    # prompt_logprobs (on-policy and GSM8K solutions, bf16 twice), and the 20 prompts generated.
    ReferenceStudy(
        "vllm-kl",
        "docs/studies/vllm-h200/kl.tar.xz",
        ("kl/prompts.*.jsonl", "kl/onpolicy.*.jsonl", "kl/gsm8k.*.jsonl"),
        title="Qwen2.5-Coder-1.5B on vLLM 0.24.0 (H100): FP8 against bf16, teacher-forced",
        ordered=True,
    ),
    # docs/studies/vllm-h200.md: the same stock configuration on two GPUs, from the two sessions'
    # records: the seed study's stock runs on an H200 against the kl phase's bf16 prompts on an H100.
    ReferenceStudy(
        "vllm-two-gpus",
        "docs/studies/vllm-h200/seed.tar.xz",
        ("seed/runs/stock*/prompts.*.jsonl", "kl/prompts.bf16.jsonl"),
        title="Qwen2.5-Coder-1.5B on vLLM 0.24.0, the stock configuration on an H200 and on an H100",
        ordered=True,
        also=("docs/studies/vllm-h200/kl.tar.xz",),
    ),
    # docs/studies/vllm-h200.md, third session: prefix caching + the 0.5B drafting for the 1.5B,
    # against a stock server on the same H100 (twice: the control), every divergence probed.
    ReferenceStudy(
        "vllm-draft",
        "docs/studies/vllm-h200/draft.tar.xz",
        ("draft/runs/stock*/*.jsonl", "draft/runs/draft*/*.jsonl", "draft/probes/*.jsonl"),
        title="Qwen2.5-Coder-1.5B on vLLM 0.24.0 (H100): stock vs prefix caching + draft-model speculation",
        ordered=True,
    ),
    # docs/studies/vllm-h100-load.md: Qwen2.5-Coder-0.5B on vLLM 0.24.0, one request at a time and
    # swept at 1 … 128 in flight (identity and hazard against 1 in flight, GSM8K at 128 against 1).
    ReferenceStudy(
        "vllm-load",
        "docs/studies/vllm-h100-load/load.tar.xz",
        ("load/runs/*/*.jsonl", "load/sweep/*/*.jsonl"),
        title="Qwen2.5-Coder-0.5B on vLLM under load: 1 … 128 requests in flight",
    ),
    # docs/studies/gpu-h200-load.md, second session: the speed sweep (CPU against backend sampling) and
    # GSM8K at 32 in flight against 1.
    ReferenceStudy(
        "gpu-load-speed",
        "docs/studies/gpu-h200-load/sweep2.tar.xz",
        ("speed/runs/*/*.jsonl", "speed/sweep/*/*.jsonl"),
        title="llama-server on a GPU under load, no logprobs: the throughput each level of concurrency buys",
    ),
    ReferenceStudy(
        "gpu-load-gsm8k",
        "docs/studies/gpu-h200-load/sweep2.tar.xz",
        ("load05/np32-c1.jsonl", "load05/np32-c32.jsonl"),
        ordered=True,
    ),
)


def summary_of(study: ReferenceStudy, scratch: Path) -> dict[str, Any]:
    """summary.json of the study's records, as the current code builds it."""
    s, options = load(study.files(scratch), title=study.title, checkpoints=study.checkpoints)
    if study.control is not None:
        s = pairs_with(s, study.control)
    return render.summary(build(s, options))


def as_intended(summary: dict[str, Any]) -> dict[str, Any]:
    """The reference with the deliberate changes applied, so that everything else is compared.

    A divergence where nothing measured A's top-k (none recorded, none probed) was classed
    "unexplained"; it is "not measured" now, and "unexplained" keeps its meaning (the other token
    was outside a measured top-k). The class counts move with it; no other number does."""
    out = copy.deepcopy(summary)
    for c in [*out.get("controls", []), *out.get("pairs", [])]:
        moved = 0
        for d in c["divergences"]:
            if d["cls"] == "unexplained" and d["a"] is None:
                d["cls"], moved = "not measured", moved + 1
                d["note"] = d["note"].replace(
                    "no logprobs obtainable for A at this position", "no top-k for A at this position"
                )
        counts = dict(c["classes"])
        counts["unexplained"] -= moved
        counts["not measured"] += moved
        c["classes"] = [[k, counts[k]] for k, _ in c["classes"]]
    return out


def differences(reference: Any, now: Any, where: str = "") -> list[str]:
    """Where ``now`` departs from ``reference``: a value changed or a key removed. Keys only in
    ``now`` are additions and allowed; so are the fields in ``CHANGED`` (deliberate changes)."""
    if isinstance(reference, dict) and isinstance(now, dict):
        out = []
        for k, v in reference.items():
            if re.sub(r"\[\d+\]", "", f"{where}.{k}") in CHANGED:
                continue
            if k not in now:
                out.append(f"{where}.{k}: removed")
            else:
                out += differences(v, now[k], f"{where}.{k}")
        return out
    if isinstance(reference, list) and isinstance(now, list):
        if len(reference) != len(now):
            return [f"{where}: {len(reference)} entries, now {len(now)}"]
        return [d for i, (r, n) in enumerate(zip(reference, now)) for d in differences(r, n, f"{where}[{i}]")]
    if (
        isinstance(reference, float)
        and isinstance(now, float)
        and math.isclose(reference, now, rel_tol=1e-12)
    ):
        return []  # a sum in another order (the reference's was one draw of a set's order)
    return [] if reference == now else [f"{where}: {reference!r} → {now!r}"]


# Fields whose text changes on purpose (each with its reason); their numbers live elsewhere.
CHANGED: dict[str, str] = {
    # A file is named relative to the working folder or by package, not by local path.
    ".suites.source": "a suite's data file",
}
