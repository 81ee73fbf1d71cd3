"""The replica check: an A/A across the replicas of one configuration.

    servediff experiment examples/ray-replicas.toml      # the report's "Replicas" section

Every replica answers the same shared subset of items; replicas that produce the same output
(text and token ids) on every one of them form a group. One group: the replicas agree. More
than one: the configuration is heterogeneous, and the replicas outside the largest group (all
of them, on a tie) are the ones that disagree. Greedy decoding on identical replicas is
deterministic per request, so any difference is the replicas', not chance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from servediff.records import Run

Output = tuple[str, tuple[int, ...] | None]


@dataclass(frozen=True, slots=True)
class ReplicaAgreement:
    replicas: int
    items: tuple[str, ...]  # the shared items every replica answered without an error
    groups: tuple[tuple[int, ...], ...]  # replica indices with identical outputs on all of them
    differing: tuple[str, ...]  # shared items on which the replicas do not all agree

    @property
    def heterogeneous(self) -> bool:
        return len(self.groups) > 1

    @property
    def disagree(self) -> tuple[int, ...]:
        """The replicas outside the largest group; every replica when the largest is shared."""
        if not self.heterogeneous:
            return ()
        sizes = sorted((len(g) for g in self.groups), reverse=True)
        if sizes[0] == sizes[1]:
            return tuple(sorted(i for g in self.groups for i in g))
        largest = max(self.groups, key=len)
        return tuple(sorted(i for g in self.groups if g is not largest for i in g))

    def summary(self) -> dict[str, Any]:
        """What the run header keeps (the report renders it from the records alone)."""
        return {
            "replicas": self.replicas,
            "items": len(self.items),
            "groups": [list(g) for g in self.groups],
            "heterogeneous": self.heterogeneous,
            "disagree": list(self.disagree),
            "differing_items": list(self.differing),
        }


def _output(run: Run, item_id: str) -> Output:
    item = run.items[item_id]
    return item.sha256, tuple(item.token_ids) if item.token_ids is not None else None


def replica_agreement(runs: Sequence[Run]) -> ReplicaAgreement:
    """Group replicas (``runs[i]`` is replica i's answers on the shared subset) by their outputs."""
    shared = sorted(set.intersection(*(r.done_ids() for r in runs)) if runs else set())
    signatures = [tuple(_output(r, i) for i in shared) for r in runs]
    groups: dict[tuple[Output, ...], list[int]] = {}
    for index, signature in enumerate(signatures):
        groups.setdefault(signature, []).append(index)
    differing = tuple(i for i in shared if len({_output(r, i) for r in runs}) > 1)
    return ReplicaAgreement(len(runs), tuple(shared), tuple(tuple(g) for g in groups.values()), differing)
