"""Send an audit's plans to a configuration and record every answer.

    servediff audit --base-url http://127.0.0.1:8080 --control-url http://127.0.0.1:8081 --out audit

One record per (role, workload, level): ``OUT/ROLE/WORKLOAD.c1.jsonl`` holds the alone sends,
``OUT/ROLE/WORKLOAD.cL.jsonl`` the blocks at concurrency L, each item carrying its prompt, block,
slot and timing round in its metadata, and the header naming the audit (role, workload, level,
seed). They are ordinary run records: the runner resumes them, and ``servediff audit --from
OUT`` recomputes the verdict from them alone.

At level L the HTTP engine runs L workers, each taking the next request as soon as its previous
one is answered, so L requests are in flight throughout (the server batches them as it likes).
A level runs round by round (one runner call per round): each round's wall clock gives one
throughput sample, and the spread of those samples is the interval on the promise's cost.
Retokenizing is off: extra requests would change the load being audited, and a retokenized id is
not the engine's own anyway.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from servediff.audit.workload import Plan, PlanOptions, Request, plan
from servediff.engines.openai_http import HTTPEngine, HTTPOptions
from servediff.runner import RunPlan, execute
from servediff.suites.base import Suite, content_sha256
from servediff.types import SamplingParams

Role = Literal["promise", "control"]
ROLES: tuple[Role, Role] = ("promise", "control")


@dataclass(frozen=True, slots=True)
class Target:
    """A running server under one role; ``annotations`` go into every record's engine identity."""

    role: Role
    label: str
    base_url: str
    annotations: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AuditOptions:
    out: Path
    workloads: tuple[str, ...] = ("needle",)
    levels: tuple[int, ...] = (8,)
    plan: PlanOptions = field(default_factory=PlanOptions)
    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(max_tokens=64, top_logprobs=5))
    model: str | None = None
    timeout_s: float = 600.0
    progress: bool = False


def record_path(out: Path, role: str, workload: str, level: int) -> Path:
    return out / role / f"{workload}.c{level}.jsonl"


def run_target(target: Target, opts: AuditOptions) -> list[Path]:
    """Every workload's alone sends and loaded blocks on one configuration; the records written."""
    written: list[Path] = []
    for workload in opts.workloads:
        p = plan(workload, opts.levels, opts.plan)
        levels = [(1, p.alone), *p.loaded.items()]
        for level, requests in levels:
            path = record_path(opts.out, target.role, workload, level)
            _run_level(target, p, level, requests, path, opts)
            written.append(path)
    return written


def _run_level(
    target: Target, p: Plan, level: int, requests: tuple[Request, ...], path: Path, opts: AuditOptions
) -> None:
    samples = p.samples(requests)
    suite = Suite(
        name=f"audit-{p.workload}",
        version="1",
        samples=samples,
        data_sha256=content_sha256(samples),
        source=f"built-in audit plan (seed {opts.plan.seed})",
    )
    audit = {
        "role": target.role,
        "workload": p.workload,
        "level": level,
        "needle": p.needle,
        "seed": opts.plan.seed,
        "blocks": opts.plan.blocks,
        "repeats": opts.plan.repeats,
    }
    http = HTTPOptions(
        base_url=target.base_url,
        model=opts.model,
        concurrency=level,
        timeout_s=opts.timeout_s,
        retokenize=False,
    )
    engine = HTTPEngine(http, target.label, annotations=target.annotations)
    run = RunPlan(suite, target.label, path, opts.sampling, concurrency=level, extra={"audit": audit})
    rounds = sorted({r.round for r in requests})
    print(f"[{target.label}] {target.role}: {p.workload} at concurrency {level}, "
          f"{len(requests)} requests", file=sys.stderr, flush=True)  # fmt: skip
    try:
        for rnd in rounds:
            only = frozenset(r.id for r in requests if r.round == rnd)
            execute(run, engine, progress=opts.progress, only=only)
    finally:
        engine.close()


@contextmanager
def launched_target(experiment: Path, label: str, role: Role, out: Path) -> Iterator[Target]:
    """A configuration of an experiment file, launched (health-gated, stopped on exit) by the
    experiment's own lifecycle; its launch argv and environment names go into the identity."""
    from servediff.experiment.session import session
    from servediff.experiment.spec import load_experiment
    from servediff.redaction import redact_argv

    exp = load_experiment(experiment, output=out / "servers")
    configs = {c.label: c for c in exp.configurations}
    if label not in configs:
        raise ValueError(f"{experiment}: no configuration labelled {label!r} (it has {sorted(configs)})")
    config = configs[label]
    with session(exp, config) as s:
        if s.base_url is None:
            raise ValueError(f"{experiment}: configuration {label!r} has no server (launch or base_url)")
        notes: dict[str, Any] = {"profile": config.profile}
        if config.launch is not None:
            notes["launch"] = list(redact_argv(config.launch.argv))
            notes["launch_env"] = sorted(dict(config.launch.env))
        yield Target(role, label, s.base_url, notes)
