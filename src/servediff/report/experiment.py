"""Report sections for experiments, rendered from the run headers alone: whether each
configuration is what it claims to be, and the load-induced nondeterminism sweep.

    servediff experiment examples/llamacpp-flash.toml      # writes OUT/report.md
    servediff compare OUT/runs/*/*.jsonl                    # the same sections from the records

Both sections are empty for runs that were not made by an experiment.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from servediff.compare.study import Configuration, Study
from servediff.record import Run
from servediff.report.mdtext import cell, code

STATUS_NOTE = {
    "NOT ENGAGED": "this configuration did not test the feature it claims",
    "NOT CONFIGURED": "the server does not have the feature configured",
}


def is_sweep(run: Run) -> bool:
    return bool(run.header.extra.get("experiment", {}).get("sweep"))


def flag_lines(study: Study) -> list[str]:
    """One line per (configuration, run, claim) whose verification failed."""
    out = []
    for c in study.configurations:
        for run in c.runs:
            v = run.header.extra.get("verification") or {}
            for claim in v.get("flagged", []):
                check = v["claims"][claim]
                out.append(
                    f"{code(c.label)} claims {claim.replace('_', ' ')} — **{check['status']}** "
                    f"({cell(c.suite)} #{run.header.repeat}: {cell(check.get('detail', ''))}); "
                    f"{STATUS_NOTE.get(check['status'], '')}"
                )
    return out


def verification(study: Study) -> list[str]:
    configs = [c for c in study.configurations if not is_sweep(c.runs[0])]
    if not any(r.header.extra.get("verification") for c in configs for r in c.runs):
        return []
    out = ["## Is each configuration what it claims to be?", ""]
    flags = flag_lines(study)
    out += [f"> **Flag:** {line}" for line in flags] + ([""] if flags else [])
    out += [
        "| configuration | engine | start | serves | version | run | claim | status | detail |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in configs:
        for run in c.runs:
            out += _rows(c, run)
    out += [
        "",
        "Counters are read from the engine's `/metrics` before and after each run (vLLM: "
        "`vllm:spec_decode_num_drafts`, `…_num_draft_tokens`, `…_num_accepted_tokens`, "
        "`…_num_accepted_tokens_per_pos`, `vllm:prefix_cache_queries`/`_hits`). Acceptance length "
        '= 1 + accepted / drafts; acceptance rate = accepted / drafted tokens. "not verified" '
        "means the engine exposes nothing that could confirm the feature either way.",
        "",
    ]
    return out


def _rows(c: Configuration, run: Run) -> list[str]:
    v: dict[str, Any] = run.header.extra.get("verification") or {}
    if not v:
        return []
    start = f"{v['startup_s']} s" if "startup_s" in v else v.get("kind", "")
    served = ", ".join(v.get("served", []))
    head = (
        f"| {code(c.label)} | {cell(v.get('profile'))} | {cell(start)} | {cell(served)} "
        f"| {cell(v.get('server_version') or 'not exposed')} | {cell(c.suite)} #{run.header.repeat}"
    )
    claims: dict[str, dict[str, Any]] = v.get("claims", {})
    if not claims:
        return [f"{head} | none claimed | – | – |"]
    rows = []
    for claim, check in claims.items():
        status = check.get("status", "")
        shown = f"**{status}**" if status in STATUS_NOTE else status
        rows.append(f"{head} | {claim} | {shown} | {cell(check.get('detail', ''))} |")
    return rows


def sweep_counts(runs: list[Run]) -> dict[str, int]:
    """Per item id: the number of distinct completions across these runs (error-free items only)."""
    seen: dict[str, set[str]] = defaultdict(set)
    for run in runs:
        for item_id, item in run.items.items():
            if item.error is None:
                seen[item_id].add(item.sha256)
    return {k: len(v) for k, v in seen.items()}


def load_sweep(study: Study) -> list[str]:
    levels: dict[str, dict[int, list[Run]]] = defaultdict(dict)
    for c in study.configurations:
        if is_sweep(c.runs[0]):
            base = c.label.rsplit("@c", 1)[0]
            levels[f"{base} ({c.suite})"][c.runs[0].header.concurrency] = c.runs
    if not levels:
        return []
    out = [
        "## Load-induced nondeterminism",
        "",
        "The same configuration, the same prompts at temperature 0, repeated at each concurrency: "
        "how many distinct completions does each prompt get across the repeats?",
        "",
    ]
    for name, by_level in levels.items():
        out += _sweep_table(name, dict(sorted(by_level.items())))
    return out


def _sweep_table(name: str, by_level: dict[int, list[Run]]) -> list[str]:
    counts = {c: sweep_counts(runs) for c, runs in by_level.items()}
    pooled = sweep_counts([r for runs in by_level.values() for r in runs])
    out = [
        f"### {code(name)}",
        "",
        "| concurrency | repeats | prompts | prompts with >1 distinct output | max distinct "
        "| mean distinct |",
        "|---|---|---|---|---|---|",
    ]
    for c, per_item in counts.items():
        n = len(per_item)
        varied = sum(1 for v in per_item.values() if v > 1)
        mean = sum(per_item.values()) / n if n else 0.0
        most = max(per_item.values(), default=0)
        out.append(f"| {c} | {len(by_level[c])} | {n} | {varied} | {most} | {mean:.2f} |")
    out += [
        "",
        "| prompt | " + " | ".join(f"c={c}" for c in counts) + " | all levels |",
        "|---|" + "---|" * (len(counts) + 1),
    ]
    items = sorted(pooled)
    if len(items) > 30:
        items = [i for i in items if pooled[i] > 1]
        out.insert(-2, f"(only the {len(items)} prompts with more than one distinct output are listed)")
    for item_id in items:
        cells = " | ".join(str(counts[c].get(item_id, "–")) for c in counts)
        out.append(f"| {cell(item_id)} | {cells} | {pooled[item_id]} |")
    return [*out, ""]


def experiment_json(study: Study) -> dict[str, Any]:
    """Verification and sweep figures for summary.json."""
    verifications = {
        f"{c.label}/{c.suite}/{r.header.repeat}": r.header.extra["verification"]
        for c in study.configurations
        for r in c.runs
        if r.header.extra.get("verification")
    }
    sweep = {
        f"{c.label}/{c.suite}": {
            "concurrency": c.runs[0].header.concurrency,
            "distinct": sweep_counts(c.runs),
        }
        for c in study.configurations
        if is_sweep(c.runs[0])
    }
    return {"verification": verifications, "flags": flag_lines(study), "sweep": sweep}
