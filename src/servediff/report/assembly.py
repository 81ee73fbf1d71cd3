"""Build the report model from (Study, ReportOptions): every number, once.

    servediff report runs/*.jsonl --md report.md --html report.html

Each comparison comes finished from ``compare.comparison`` (its alignment, gaps, classes, drift
and hazard, at one threshold: ``options.near_tie``), its quality from ``compare.quality``.
Nothing here formats text; the renderers do nothing else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from servediff.compare import filenames
from servediff.compare.comparison import comparison
from servediff.compare.concurrency import load_sweeps
from servediff.compare.kl_runs import is_scoring, kl_rows, without_scoring_pairs
from servediff.compare.quality import quality
from servediff.compare.report_options import ReportOptions
from servediff.compare.sampled import sampled
from servediff.compare.shadow import segments
from servediff.compare.study import Configuration, Study
from servediff.compare.sweep import sweeps
from servediff.records import Run
from servediff.redaction import redact_argv
from servediff.report import cluster_view, experiment_view
from servediff.report.model import (
    SCHEMA_VERSION,
    Claim,
    Engine,
    Matrix,
    Report,
    SuiteMethod,
    Tool,
)
from servediff.report.rows.factor_table import factor_tables
from servediff.report.rows.runs import run_rows
from servediff.report.rows.speed_table import speed_rows
from servediff.report.rows.verdicts import verdicts

# A model whose name says it was tuned for chat answers raw prompts as text to continue.
CHAT_MODEL = re.compile(r"instruct|chat|-it\b|\bit\b", re.IGNORECASE)

LIMITATIONS = (
    "Byte identity is about text, not quality: a divergence can be better, worse or equivalent. "
    "Only a scored benchmark says whether accuracy moved.",
    "Determinism is shown for these prompts, this hardware, these library versions and this request "
    "order; another batch composition or machine can differ.",
    "A control that is identical does not prove the engine is deterministic in general, only that it "
    "was across these repeats.",
    "Divergence positions depend on the prompts: longer completions give near-ties more chances to flip.",
    "A gap computed from logprobs recorded during a run is that run's own view; a separate one-pass "
    "probe is another computation with its own error.",
    "Intervals are 95 % and per comparison: with many pairs, some will exclude the truth by chance.",
)


def build(study: Study, options: ReportOptions) -> Report:
    # Scoring runs hold the same fixed text on both sides: their pairs are the KL section's only,
    # never identity rows or verdicts ("20/20 identical" of a fixed text would mean nothing).
    kl = kl_rows(study)
    study = without_scoring_pairs(study)
    scored = quality(study, options.margin)
    quality_ = scored if scored.accuracies else None
    claims = experiment_view.claims(study)
    # Speed first: it lets go of the runs' speed columns (``compare.speed``) before the
    # comparisons build their divergence views, rather than both at once at the peak.
    speed = speed_rows(study, options.warmup)
    return Report(
        schema_version=SCHEMA_VERSION,
        title=options.title,
        near_tie=options.near_tie,
        warnings=study.warnings,
        engines=engines(study),
        suites=tuple(suite_method(study, s) for s in study.suites),
        method_notes=method_notes(study),
        tool=tool(study.configurations[0].runs[0]),
        controls=tuple(comparison(p, options) for p in study.controls),
        pairs=tuple(comparison(p, options) for p in study.pairs),
        quality=quality_,
        matrices=matrices(study),
        claims=claims,
        sweeps=sweeps(study),
        limitations=LIMITATIONS,
        speed=speed,
        verdicts=verdicts(
            study, options.warmup, quality_.pairs if quality_ else (), verification(claims), speed
        ),
        warmup=options.warmup,
        attribution=factor_tables(study, options.margin),
        kl=kl,
        sampled=sampled(study, options.margin),
        placements=cluster_view.placements(study),
        replica_checks=cluster_view.replica_checks(study),
        claim_groups=experiment_view.grouped(claims),
        runs=run_rows(study),
        load=load_sweeps(study, options.warmup, options.margin, options.near_tie),
        shadow=segments(study),
    )


def verification(claims: Sequence[Claim]) -> dict[str, str]:
    """label → what its checks found ("flash_attn ENGAGED, …"), each finding once, for the verdicts."""
    said: dict[str, dict[str, None]] = {}
    for c in claims:
        if c.claim is not None:
            said.setdefault(c.label, {})[f"{c.claim} {c.status}"] = None
    return {label: ", ".join(found) for label, found in said.items()}


# --- method -----------------------------------------------------------------------------------
def prompt_form(run: Run) -> str:
    first = next(iter(run.items.values()), None)
    if first is not None and isinstance(first.input, list):
        return "chat messages"
    # A text prompt a client already put through the chat template (lm-eval hf --apply_chat_template).
    options = run.header.engine.get("options")
    if isinstance(options, dict) and options.get("chat_template") is True:
        return "prompt with the chat template applied"
    return "raw prompt"


ASKED = {
    ("http", "chat messages"): "/v1/chat/completions (the server's chat template)",
    ("http", "raw prompt"): "/v1/completions (raw prompt, no chat template)",
    ("llamacpp", "chat messages"): "chat completion with the GGUF's chat template, in-process",
    ("llamacpp", "raw prompt"): "raw completion (no chat template), in-process",
    ("hf", "chat messages"): "the tokenizer's chat template, in-process",
    ("hf", "raw prompt"): "raw prompt (no chat template), in-process",
}


def asked(kind: str, form: str) -> str:
    return ASKED.get((kind, form), f"as the {kind} log records it ({form})")


def engines(study: Study) -> tuple[Engine, ...]:
    """One row per configuration label, not per (configuration, suite)."""
    by_label: dict[str, list[Configuration]] = {}
    for c in study.configurations:
        by_label.setdefault(c.label, []).append(c)
    return tuple(_engine(label, cs) for label, cs in by_label.items())


def _engine(label: str, configs: Sequence[Configuration]) -> Engine:
    run = configs[0].runs[0]
    e = run.header.engine
    kind = str(e.get("kind"))
    what = e.get("knobs") or _launch(e.get("launch")) or e.get("options") or {}
    forms = {c.suite: asked(kind, prompt_form(c.runs[0])) for c in configs}
    how = (
        next(iter(forms.values()))
        if len(set(forms.values())) == 1
        else "; ".join(f"{s}: {a}" for s, a in forms.items())
    )
    imported = run.header.extra.get("imported_from")
    return Engine(
        label=label,
        kind=kind,
        model=filenames.in_text(str(e.get("model"))),
        # An import that records no URL ran somewhere unknown, not in this process.
        where=str(e.get("base_url") or ("not recorded" if imported else "in-process")),
        version=str(e.get("server_version") or "not exposed"),
        settings=filenames.in_text(json.dumps(what, sort_keys=True)),
        asked=how,
        suites=tuple(c.suite for c in configs),
        runs=sum(len(c.runs) for c in configs),
        imported=_origin(label, imported, e) if isinstance(imported, dict) else None,
    )


def _launch(argv: object) -> list[str] | None:
    """The launch argv to show: redacted again, for records written before redaction existed."""
    return redact_argv([str(a) for a in argv]) if isinstance(argv, list) and argv else None


def _origin(label: str, imported: dict[str, Any], engine: dict[str, Any]) -> str:
    return filenames.in_text(imported_origin(label, imported, engine))


def imported_origin(label: str, source: dict[str, Any], engine: dict[str, Any]) -> str:
    """One sentence on where an imported run came from: the tool, its settings and where the
    model was served (plain text: each renderer escapes it)."""
    tool_ = f"{source.get('tool')} {source.get('tool_version') or '(version not recorded)'}"
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
        f"{label}: imported from {tool_} ({source.get('format')} format {source.get('format_version')}), "
        f"file {source.get('file')}; {picked}; model {engine.get('model')} served at {where}"
        + (f" through {client}" if client else "")
        + (f", generation settings {json.dumps(generation, sort_keys=True)}" if generation else "")
        + "."
    )


def suite_method(study: Study, suite: str) -> SuiteMethod:
    configs = [c for c in study.configurations if c.suite == suite]
    h = configs[0].runs[0].header
    return SuiteMethod(
        name=suite,
        version=h.suite.version,
        source=filenames.in_text(h.suite.source),
        items=len(h.suite.item_ids),
        content_sha256=h.suite.content_sha256,
        data_sha256=h.suite.data_sha256,
        sampling=h.sampling,  # temperature and seed may be unrecorded (an import)
        concurrency=h.concurrency,
        prompt_form=prompt_form(configs[0].runs[0]),
        runs=tuple((c.label, len(c.runs)) for c in configs),
        scoring=h.suite.scoring,
    )


def sent_note(label: str, engine: dict[str, Any]) -> str | None:
    """What a run that sent a client's few sampling fields (``run --send minimal``) left to the
    server; None for a run that sent every field it knows (the default)."""
    if engine.get("send") in (None, "all"):
        return None
    sent = ", ".join(str(f) for f in engine.get("sent") or ())
    defaults = engine.get("server_defaults")
    applied = (
        f"the server's reported defaults: {json.dumps(defaults, sort_keys=True)}"
        if isinstance(defaults, dict)
        else "the server does not report its defaults, so this report cannot name them"
    )
    return (
        f"{label} sent only {sent} of the sampling (--send {engine.get('send')}), as a client that "
        f"relies on the server's defaults does; every other field was the server's default ({applied})."
    )


def method_notes(study: Study) -> tuple[str, ...]:
    out: list[str] = []
    for label in dict.fromkeys(c.label for c in study.configurations):
        engine = next(c for c in study.configurations if c.label == label).runs[0].header.engine
        note = sent_note(label, engine)
        if note is not None:
            out.append(note)
    for c in study.configurations:
        model = str(c.runs[0].header.engine.get("model") or "")
        # A scoring run sends raw text on purpose: it is scored, not answered.
        scored = is_scoring(c.runs[0])
        if not scored and prompt_form(c.runs[0]) == "raw prompt" and CHAT_MODEL.search(model):
            out.append(
                f"{c.label} sent the {c.suite} suite to {model} as raw prompts, with no chat template: an "
                "instruct model continues such text rather than answering it (write the suite's lines as "
                '{"id", "messages"} to go through the chat template).'
            )
    return tuple(out)


def tool(run: Run) -> Tool:
    h = run.header
    env = h.environment
    return Tool(h.tool_version, h.git_revision, str(env.get("python")), str(env.get("platform")), h.created)


def matrices(study: Study, minimum: int = 3) -> tuple[Matrix, ...]:
    """Share of byte-identical completions for every pair, where a suite has 3+ configurations."""
    out = []
    for suite in study.suites:
        labels = tuple(c.label for c in study.configurations if c.suite == suite)
        if len(labels) < minimum:
            continue
        share = {(p.a, p.b): p.identical / p.total for p in study.comparisons if p.suite == suite and p.total}
        cells = tuple(tuple(share.get((a, b), share.get((b, a))) for b in labels) for a in labels)
        out.append(Matrix(suite, labels, cells))
    return tuple(out)
