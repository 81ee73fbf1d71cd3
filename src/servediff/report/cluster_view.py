"""Where each run ran and whether a configuration's replicas agree, from the run headers alone.

    servediff experiment examples/ray-replicas.toml --executor ray   # OUT/report.md

Both are empty for runs made on one machine by one server.
"""

from __future__ import annotations

from servediff.compare.loader import is_sweep
from servediff.compare.study import Study
from servediff.report.model import Placement, ReplicaCheck


def placements(study: Study) -> tuple[Placement, ...]:
    out = []
    for c in study.configurations:
        for run in c.runs:
            p = run.header.extra.get("placement")
            if not p:
                continue
            out.append(
                Placement(
                    label=c.label,
                    suite=c.suite,
                    repeat=run.header.repeat,
                    executor=str(p.get("executor", "")),
                    node=f"{p.get('hostname', '')} ({p.get('node_ip', '')})",
                    node_id=str(p.get("node_id", ""))[:12],
                    gpus=", ".join(map(str, p.get("gpus", []))) or "none",
                )
            )
    return tuple(out)


def replica_checks(study: Study) -> tuple[ReplicaCheck, ...]:
    out = []
    for c in study.configurations:
        if is_sweep(c.runs[0]):
            continue
        for run in c.runs:
            r = run.header.extra.get("replica_check")
            if not r:
                continue
            out.append(
                ReplicaCheck(
                    label=c.label,
                    suite=c.suite,
                    replicas=int(r["replicas"]),
                    items=int(r["items"]),
                    heterogeneous=bool(r["heterogeneous"]),
                    groups=tuple(tuple(g) for g in r["groups"]),
                    disagree=tuple(r["disagree"]),
                    differing=tuple(r["differing_items"]),
                    urls=tuple(r.get("urls", ())),
                )
            )
    return tuple(out)
