"""Run the replica check of a configuration with several replicas: every replica answers the
same first items of the suite, each into its own record under ``replicas/``, and the records are
compared (``compare.replicas``); the result goes into the main run's header.

    servediff experiment examples/ray-replicas.toml       # OUT/replicas/LABEL.DIGEST/*.repN.jsonl
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from servediff.compare.replicas import replica_agreement
from servediff.engines import Engine
from servediff.experiment.plan import Slot
from servediff.records import RecordError, read_header, read_run
from servediff.runner import RunPlan, execute
from servediff.suites.draws import expand


def replica_path(slot: Slot, index: int) -> Path:
    """OUT/replicas/LABEL.DIGEST/SUITE.DIGEST.repN.jsonl beside OUT/runs/LABEL.DIGEST/…r1.jsonl."""
    name = slot.path.name.replace(".r1.jsonl", f".rep{index}.jsonl")
    return slot.path.parents[2] / "replicas" / slot.path.parent.name / name


def check_due(slot: Slot) -> bool:
    """A first-repeat run of a configuration with replicas whose header has no check yet."""
    if slot.config.replicas < 2 or slot.repeat != 1 or slot.sweep or not slot.path.is_file():
        return False
    try:
        return "replica_check" not in read_header(slot.path).extra
    except RecordError:
        return False


def check_replicas(plan: RunPlan, slot: Slot, engines: list[Engine], progress: bool) -> dict[str, Any]:
    """Each replica answers the shared subset (resuming a check that was cut short); the
    agreement summary, with the check's records relative to the output folder."""
    size = slot.config.replica_check
    shared = frozenset(s.id for s in expand(plan.suite, plan.sampling).samples[:size])
    paths = []
    for index, engine in enumerate(engines):
        path = replica_path(slot, index)
        mine = dataclasses.replace(plan, label=f"{plan.label}@rep{index}", out=path, extra=None)
        try:
            execute(mine, engine, progress=progress, only=shared)
        finally:
            engine.close()
        paths.append(path)
    agreement = replica_agreement([read_run(p) for p in paths])
    output = slot.path.parents[2]
    return {**agreement.summary(), "records": [str(p.relative_to(output)) for p in paths]}
