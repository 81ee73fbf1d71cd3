"""Part 4: tokens/s of the embedded llama.cpp engine through servediff vs llama_cpp.Llama directly.

    .venv/bin/python bench/main.py --parts embedded

For ``stock`` and ``tuned`` (the named configurations of ``servediff configs``), each side runs
in its own process (embedded_worker.py), alternating, with the same knobs, prompts and greedy
settings. The ratio servediff ÷ direct is the engine wrapper's cost; tuned ÷ stock is what
the tuning did to speed on this CPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from common import BENCH, PYTHON, Row, log, median, run_timed

TARGET = 0.05


@dataclass(frozen=True, slots=True)
class Config:
    repeats: int = 3
    prompts: int = 8
    max_tokens: int = 96
    threads: int = 1  # both sides; see bench/README.md for why not every core


def _pass(side: str, config: str, cfg: Config) -> tuple[float, float, list[str]]:
    """(tokens per wall second, tokens per CPU second, texts) of one worker process."""
    argv = [PYTHON, str(BENCH / "embedded_worker.py"), "--side", side, "--config", config]
    argv += [
        "--prompts",
        str(cfg.prompts),
        "--max-tokens",
        str(cfg.max_tokens),
        "--threads",
        str(cfg.threads),
    ]
    out = json.loads(run_timed(argv).stdout.strip().splitlines()[-1])
    return out["tokens"] / out["seconds"], out["tokens"] / out["cpu_seconds"], out["texts"]


def measure(cfg: Config, work: Path) -> list[Row]:
    rates: dict[tuple[str, str], list[float]] = {}
    per_cpu: dict[tuple[str, str], list[float]] = {}
    same: dict[str, tuple[int, int]] = {}
    for rep in range(cfg.repeats):
        for config in ("stock", "tuned"):
            sides = ("servediff", "direct") if rep % 2 == 0 else ("direct", "servediff")
            texts = {}
            for side in sides:
                rate, rate_cpu, texts[side] = _pass(side, config, cfg)
                rates.setdefault((config, side), []).append(rate)
                per_cpu.setdefault((config, side), []).append(rate_cpu)
                log(f"embedded {config} #{rep + 1} {side}: {rate:.1f} tokens/s, {rate_cpu:.1f} per CPU s")
            n = sum(a == b for a, b in zip(texts["servediff"], texts["direct"]))
            same[config] = (n, len(texts["direct"]))
    m = {k: median(v) for k, v in rates.items()}
    c = {k: median(v) for k, v in per_cpu.items()}
    return _rows(cfg, m, c, same)


def _rows(
    cfg: Config,
    m: dict[tuple[str, str], float],
    c: dict[tuple[str, str], float],
    same: dict[str, tuple[int, int]],
) -> list[Row]:
    part = "4. embedded llama.cpp (tokens/s)"
    rows = []
    for config in ("stock", "tuned"):
        sd, direct = m[(config, "servediff")], m[(config, "direct")]
        gap, gap_cpu = sd / direct - 1, c[(config, "servediff")] / c[(config, "direct")] - 1
        n, total = same[config]
        rows.append(Row(part, f"`{config}` direct `llama_cpp.Llama`", f"{direct:.1f}"))
        rows.append(
            Row(
                part,
                f"`{config}` through servediff (same texts as direct: {n}/{total})",
                f"{sd:.1f} ({gap:+.1%})",
                "within 5 %",
                abs(gap) <= TARGET,
            )
        )
        rows.append(
            Row(
                part,
                f"`{config}` tokens per CPU second, servediff ÷ direct (load-independent)",
                f"{gap_cpu:+.1%}",
                "within 5 %",
                abs(gap_cpu) <= TARGET,
            )
        )
    for side in ("direct", "servediff"):
        speed = m[("tuned", side)] / m[("stock", side)]
        rows.append(Row(part, f"what tuning did to speed ({side}): tuned ÷ stock", f"{speed:.2f}×"))
    rows.append(
        Row(
            part,
            "setup",
            f"{cfg.prompts} prompts × ≤ {cfg.max_tokens} tokens, {cfg.threads} thread(s), "
            f"median of {cfg.repeats} runs",
        )
    )
    return rows
