"""Tokens per second per configuration, from the records, and against ``model.generate`` alone.

    servediff demo --engine hf      # a section of its report

A configuration's wall time is the sum of its batches' wall times (the engine records each
item's batch and that batch's wall time); tokens are the generated tokens up to the stop token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from servediff.compare.study import Study
from servediff.record import Run
from servediff.report.mdtext import cell, code

Section = Callable[[Study], list[str]]


def run_throughput(run: Run) -> tuple[int, float, float | None]:
    """(generated tokens, wall seconds, seconds inside model.generate or None) of a run.

    Batches are counted once each."""
    tokens, walls, inside = 0, {}, {}
    for item_id, item in run.items.items():
        if item.error:
            continue
        tokens += item.n_tokens or 0
        meta = item.metadata.get("engine") or {}
        key = meta.get("batch", item_id)
        walls[key] = float(meta.get("batch_wall_s", item.latency_s))
        if "generate_s" in meta:
            inside[key] = float(meta["generate_s"])
    gen = sum(inside.values()) if inside and len(inside) == len(walls) else None
    return tokens, sum(walls.values()), gen


def _rate(tokens: int, wall: float) -> str:
    return f"{tokens / wall:,.1f}" if wall > 0 else "n/a"


HARDWARE_KEYS = (
    "gpu",
    "driver",
    "cuda",
    "cudnn",
    "compute_capability",
    "gpu_memory_gib",
    "cpu",
    "torch_threads",
    "tf32_matmul",
    "tf32_cudnn",
    "float32_matmul_precision",
    "deterministic_algorithms",
)


def hardware_section(study: Study) -> list[str]:
    """Where each configuration ran: device, driver, CUDA, library versions, TF32 switches."""
    out = [
        "## Hardware and software",
        "",
        "| configuration | device | versions | details |",
        "|---|---|---|---|",
    ]
    for c in study.configurations:
        hw = c.runs[0].header.engine.get("hardware")
        if not hw:
            continue
        versions = ", ".join(f"{k} {v}" for k, v in sorted((hw.get("versions") or {}).items()) if v)
        details = "; ".join(f"{k} {hw[k]}" for k in HARDWARE_KEYS if k in hw)
        out.append(f"| {code(c.label)} | {cell(hw.get('device'))} | {cell(versions)} | {cell(details)} |")
    return [*out, ""] if len(out) > 4 else []


def throughput_section(direct: Sequence[dict[str, Any]]) -> Section:
    """The section, with the direct ``model.generate`` timings measured alongside the runs."""
    by_label = {d["label"]: d for d in direct}

    def section(study: Study) -> list[str]:
        out = [
            "## Tokens per second",
            "",
            "| configuration | repeat | tokens | wall (s) | of which in `generate` | servediff tokens/s "
            "| direct `model.generate` tokens/s | servediff / direct | same token ids as direct |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for c in study.configurations:
            for run in c.runs:
                tokens, wall, gen = run_throughput(run)
                inside = f"{gen:.2f} ({100 * gen / wall:.1f} %)" if gen is not None and wall else "n/a"
                d = by_label.get(run.label) if run.header.repeat == 1 else None
                cells = ["", "", ""]
                if d:
                    ratio = (tokens / wall) / (d["tokens"] / d["wall_s"]) if wall and d["wall_s"] else 0.0
                    cells = [
                        _rate(d["tokens"], d["wall_s"]),
                        f"{ratio:.3f}",
                        f"{d['same_token_ids']}/{d['items']}",
                    ]
                out.append(
                    f"| {code(run.label)} | {run.header.repeat} | {tokens} | {wall:.2f} | {inside} "
                    f"| {_rate(tokens, wall)} | " + " | ".join(cells) + " |"
                )
        out += [
            "",
            "servediff's wall time includes tokenizing, padding, the top-k logprobs of every token and "
            "decoding; 'of which in `generate`' is the part spent inside `model.generate` during that same "
            "run, so the rest is servediff's own cost. The direct call times `model.generate` alone on "
            "pre-tokenized batches with the same generation settings, right after servediff's run in the "
            "same process: a separate run, so its ratio also carries run-to-run timing noise.",
        ]
        return [*out, ""]

    return section
