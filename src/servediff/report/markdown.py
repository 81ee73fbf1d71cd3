"""The Markdown report, rendered from a Study (which is computed from records only).

servediff compare runs/*.jsonl --md report.md
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from servediff.compare.study import PairResult, Study
from servediff.record import Run
from servediff.redaction import redact_argv
from servediff.report import quality
from servediff.report.experiment import load_sweep, verification
from servediff.report.mdtext import cell, code

Section = Callable[[Study], list[str]]


def ratio(k: int, n: int) -> str:
    return f"{k}/{n}" if n else "0/0"


def verdict_control(p: PairResult) -> str:
    if p.total == 0:
        return "nothing to compare"
    return "deterministic" if p.identical == p.total else "NOT deterministic"


def summary(study: Study) -> list[str]:
    out = ["## Summary", ""]
    for w in study.warnings:
        out.append(f"> **Warning:** {w}")
    for p in study.controls:
        out.append(
            f"- Control {code(p.a)} ({cell(p.suite)}): **{ratio(p.identical, p.total)}** identical "
            f"across repeats — {verdict_control(p)}."
        )
    if not study.controls:
        out.append(
            "- No control: no configuration was run twice, so a difference between "
            "configurations cannot be told apart from run-to-run noise."
        )
    for p in study.pairs:
        where = ", ".join(f"{d.char_index}" for d in p.divergences)
        out.append(
            f"- {code(p.a)} vs {code(p.b)} ({cell(p.suite)}): "
            f"**{ratio(p.identical, p.total)}** byte-identical"
            + (f"; first differences at characters {where}" if where else "")
            + "."
        )
    errors = sum(p.errors for p in [*study.controls, *study.pairs])
    if errors:
        out.append(f"- {errors} item comparison(s) left out because a run recorded an engine error.")
    return [*out, ""]


def _engine_line(run: Run) -> str:
    e = run.header.engine
    what = e.get("knobs") or launch_argv(e) or e.get("options") or {}
    where = e.get("base_url") or "in-process"
    return (
        f"| {code(run.label)} | {e.get('kind')} | {cell(e.get('model'))} | {cell(where)} | "
        f"{cell(e.get('server_version') or 'not exposed')} | {cell(json.dumps(what, sort_keys=True))} |"
    )


def launch_argv(engine: dict[str, Any]) -> list[str] | None:
    """The launch argv to show: redacted again, for records written before redaction existed."""
    argv = engine.get("launch")
    return redact_argv([str(a) for a in argv]) if isinstance(argv, list) and argv else None
def imported_origin(label: str, source: dict[str, Any], engine: dict[str, Any]) -> str:
    """One sentence on where an imported run came from; shared wording of both reports (plain text:
    each renderer escapes it)."""
    tool = f"{source.get('tool')} {source.get('tool_version') or '(version not recorded)'}"
    shown: dict[str, Any] = {
        k: source[k] for k in ("task", "filter", "metric", "scorer", "epoch", "num_fewshot") if k in source
    }
    if source.get("prompt_template") is not None:  # quoted: it holds placeholders and punctuation
        shown["prompt template"] = f"'{source['prompt_template']}'"
    picked = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in shown.items() if v is not None)
    options = engine.get("options") or {}
    client = options.get("client") if isinstance(options, dict) else None
    where = engine.get("base_url") or "an address the log does not record"
    generation = options.get("generation") if isinstance(options, dict) else None
    return (
        f"{label}: imported from {tool} ({source.get('format')} format {source.get('format_version')}), "
        f"file {source.get('file')}; {picked}; model {engine.get('model')} served at {where}"
        + (f" through {client}" if client else "")
        + (f", generation settings {json.dumps(generation, sort_keys=True)}" if generation else "")
        + "."
    )


def method(study: Study) -> list[str]:
    out = [
        "## Method",
        "",
        "| configuration | engine | model | where | version | settings |",
        "|---|---|---|---|---|---|",
    ]
    # One row per configuration, not per (configuration, suite): a suite does not change the engine.
    out += list(dict.fromkeys(_engine_line(c.runs[0]) for c in study.configurations))
    out.append("")
    for suite in study.suites:
        cfgs = [c for c in study.configurations if c.suite == suite]
        h = cfgs[0].runs[0].header
        s = h.sampling
        out.append(
            f"- Suite {code(suite)} v{cell(h.suite.version)} ({cell(h.suite.source)}), "
            f"{len(h.suite.item_ids)} items, "
            f"content SHA-256 `{h.suite.content_sha256[:16]}…`, data SHA-256 `{h.suite.data_sha256[:16]}…`."
        )
        out.append(
            f"- Sampling: temperature {s.temperature}, seed {s.seed}, max_tokens {s.max_tokens}, "
            f"top_logprobs {s.top_logprobs or 'not requested'}, enable_thinking "
            f"{'not sent' if s.enable_thinking is None else s.enable_thinking}; "
            f"concurrency {h.concurrency}."
        )
        reps = ", ".join(f"{code(c.label)} ×{len(c.runs)}" for c in cfgs)
        out.append(f"- Runs: {reps}.")
        for c in cfgs:
            h = c.runs[0].header
            if isinstance(source := h.extra.get("imported_from"), dict):
                out.append(f"- {cell(imported_origin(c.label, source, h.engine))}")
    first = study.configurations[0].runs[0].header
    out.append(
        f"- servediff {first.tool_version}"
        + (f" (git {first.git_revision[:10]})" if first.git_revision else "")
        + f", Python {first.environment.get('python')}, {first.environment.get('platform')}; "
        f"first run created {first.created}."
    )
    return [*out, ""]


def identity_tables(study: Study) -> list[str]:
    out = [
        "## Does the configuration change the output?",
        "",
        "| suite | A | B | kind | identical | errors left out |",
        "|---|---|---|---|---|---|",
    ]
    for p in [*study.controls, *study.pairs]:
        out.append(
            f"| {cell(p.suite)} | {code(p.a)} #{p.a_run.header.repeat} "
            f"| {code(p.b)} #{p.b_run.header.repeat} "
            f"| {p.kind} | {ratio(p.identical, p.total)} | {p.errors} |"
        )
    return [*out, ""]


def divergences(study: Study) -> list[str]:
    out = ["## Every divergence", ""]
    for p in [*study.controls, *study.pairs]:
        if not p.divergences:
            continue
        out += [
            f"### {code(p.a)} vs {code(p.b)} ({cell(p.suite)}, {p.kind})",
            "",
            "| item | char | token | …common prefix | A next | B next | A tokens | B tokens |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for d in p.divergences:
            tok = "n/a" if d.token_index is None else str(d.token_index)
            out.append(
                f"| {cell(d.item_id)} | {d.char_index} | {tok} | {cell(d.prefix_tail)} | "
                f"{cell(d.a_next)} | {cell(d.b_next)} | {d.a_tokens} | {d.b_tokens} |"
            )
        out.append("")
    if len(out) == 2:
        out += ["None: every compared completion was byte-identical.", ""]
    return out


def limitations(study: Study) -> list[str]:
    return [
        "## What this study does not establish",
        "",
        "- Byte identity is about text, not quality: a divergence can be better, worse or "
        "equivalent. Only a scored benchmark says whether accuracy moved.",
        "- Determinism is shown for these prompts, this hardware, these library versions and "
        "this request order; another batch composition or machine can differ.",
        "- A control that is identical does not prove the engine is deterministic in general, "
        "only that it was across these repeats.",
        "- Divergence positions depend on the prompts: longer completions give near-ties more "
        "chances to flip.",
        "",
    ]


def measured(study: Study) -> list[str]:
    # Imported here: that module uses this one's helpers.
    from servediff.report.measured import measured as section

    return section(study)


SECTIONS: list[Section] = [
    summary,
    verification,
    method,
    identity_tables,
    quality.section,
    divergences,
    measured,
    load_sweep,
    limitations,
]


def render(study: Study, title: str = "servediff report", sections: list[Section] | None = None) -> str:
    lines = [f"# {title}", ""]
    for section in sections or SECTIONS:
        lines += section(study)
    return "\n".join(lines).rstrip() + "\n"


def summary_json(study: Study) -> dict[str, Any]:
    """The machine-readable summary printed by ``compare --json``."""

    def pair(p: PairResult) -> dict[str, Any]:
        return {
            "suite": p.suite,
            "a": p.a,
            "b": p.b,
            "kind": p.kind,
            "a_repeat": p.a_run.header.repeat,
            "b_repeat": p.b_run.header.repeat,
            "identical": p.identical,
            "total": p.total,
            "errors": p.errors,
            "divergences": [
                {
                    "item_id": d.item_id,
                    "char_index": d.char_index,
                    "token_index": d.token_index,
                    "token_source": d.token_source,
                    "prefix_tail": d.prefix_tail,
                    "a_next": d.a_next,
                    "b_next": d.b_next,
                    "a_tokens": d.a_tokens,
                    "b_tokens": d.b_tokens,
                }
                for d in p.divergences
            ],
        }

    return {
        "configurations": [
            {"suite": c.suite, "label": c.label, "runs": [str(r.path) for r in c.runs]}
            for c in study.configurations
        ],
        "controls": [pair(p) for p in study.controls],
        "pairs": [pair(p) for p in study.pairs],
        "warnings": study.warnings,
        "mechanism": _mechanism_json(study),
        "quality": quality.summary(study),
    }


def _mechanism_json(study: Study) -> list[dict[str, Any]]:
    from servediff.report.measured import mechanism_json

    return mechanism_json(study)
