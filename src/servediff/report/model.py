"""The report model: every number any output shows, computed once from (Study, ReportOptions).

    servediff compare runs/*.jsonl --md report.md --json      # both render this one object

``build`` turns the records (grouped into a Study) and the report options into a frozen
``Report``. ``report.md``, ``report.html``, ``summary.json`` render it and compute nothing:
the sections (``report.sections``) lay it out with the shared formats of ``report.fmt``, and
``summary.json`` is the model's own serialisation (``report.render.summary``). A new kind of
evidence is a compare/ dataclass held by a field here, then one section file.
"""

from __future__ import annotations

from dataclasses import dataclass

from servediff.compare.comparison import Comparison, gapped
from servediff.compare.concurrency import LoadSweep
from servediff.compare.kl_runs import KlRow
from servediff.compare.quality import Quality
from servediff.compare.sampled import Sampled
from servediff.compare.shadow import ShadowSegment
from servediff.compare.sweep import Sweep
from servediff.compare.verify_result import VerifyResult
from servediff.records import SamplingInfo
from servediff.report.rows.factor_table import FactorTable
from servediff.report.rows.runs import RunRow
from servediff.report.rows.speed_table import SpeedRow
from servediff.report.rows.verdicts import Verdict

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class Engine:
    """One configuration as the Method table shows it (one row per configuration)."""

    label: str
    kind: str
    model: str
    where: str  # base URL, or "in-process"
    version: str  # server or library version, or "not exposed"
    settings: str  # knobs / launch argv / options as sorted JSON
    asked: str  # how items reached the model: endpoint and chat template
    suites: tuple[str, ...]
    runs: int
    imported: str | None  # the tool, version, file and settings an imported run came from


@dataclass(frozen=True, slots=True)
class SuiteMethod:
    name: str
    version: str
    source: str
    items: int
    content_sha256: str
    data_sha256: str
    sampling: SamplingInfo  # as the run header records it
    concurrency: int
    prompt_form: str  # "chat messages", "raw prompt" or "prompt with the chat template applied"
    runs: tuple[tuple[str, int], ...]  # (label, repeats)
    scoring: str | None = None  # how answers were scored, where the suite's name alone does not say


@dataclass(frozen=True, slots=True)
class Tool:
    version: str
    git_revision: str | None
    python: str
    platform: str
    created: str


@dataclass(frozen=True, slots=True)
class Matrix:
    suite: str
    labels: tuple[str, ...]
    identical: tuple[tuple[float | None, ...], ...]  # share byte-identical; diagonal: control


@dataclass(frozen=True, slots=True)
class Claim:
    """One verification row: is a configuration what it claims to be (experiments only)."""

    label: str
    suite: str
    repeat: int
    profile: str
    start: str
    serves: str
    version: str
    claim: str | None  # None: the configuration claims nothing checkable
    status: str
    detail: str
    flagged: bool


@dataclass(frozen=True, slots=True)
class ClaimGroup:
    """Claims that read the same in several runs of one configuration, said once."""

    label: str
    profile: str
    starts: tuple[str, ...]  # each run's start (startup seconds or launch kind), distinct, in run order
    serves: str
    version: str
    claims: tuple[str, ...]  # empty: the configuration claims nothing checkable
    status: str
    detail: str
    flagged: bool
    runs: tuple[tuple[str, int], ...]  # (suite, repeat) of every run the row holds for


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one run of a configuration ran, when a cluster executor placed it."""

    label: str
    suite: str
    repeat: int
    executor: str
    node: str  # host name and IP
    node_id: str
    gpus: str  # the GPU ids the cluster gave it ("none": a CPU-only placement)


@dataclass(frozen=True, slots=True)
class ReplicaCheck:
    """The A/A across the replicas of one configuration on a shared subset of a suite."""

    label: str
    suite: str
    replicas: int
    items: int  # shared items every replica answered
    heterogeneous: bool
    groups: tuple[tuple[int, ...], ...]  # replicas with identical outputs
    disagree: tuple[int, ...]  # replicas outside the largest group (all of them on a tie)
    differing: tuple[str, ...]  # shared items the replicas do not all agree on
    urls: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Report:
    schema_version: int
    title: str
    near_tie: float  # nats: the one threshold every class and plot uses
    warnings: tuple[str, ...]
    engines: tuple[Engine, ...]
    suites: tuple[SuiteMethod, ...]
    method_notes: tuple[str, ...]  # e.g. an instruct model sent raw prompts
    tool: Tool
    controls: tuple[Comparison, ...]  # each configuration against its own repeats
    pairs: tuple[Comparison, ...]  # configurations against each other
    quality: Quality | None  # None: no scored run
    matrices: tuple[Matrix, ...]
    claims: tuple[Claim, ...]
    sweeps: tuple[Sweep, ...]
    limitations: tuple[str, ...]
    # Speed: per (suite, configuration), and the one-line verdicts that open the Summary.
    speed: tuple[SpeedRow, ...] = ()
    verdicts: tuple[Verdict, ...] = ()
    warmup: int = 1  # items per run left out of every speed number
    attribution: tuple[FactorTable, ...] = ()  # one per suite of a factor design
    kl: tuple[KlRow, ...] = ()  # teacher-forced divergence of scoring runs (controls first)
    sampled: Sampled | None = None  # pass rates over k draws per item (temperature > 0 runs)
    placements: tuple[Placement, ...] = ()  # runs a cluster executor placed
    replica_checks: tuple[ReplicaCheck, ...] = ()  # configurations served by several replicas
    claim_groups: tuple[ClaimGroup, ...] = ()  # the claims, one row per configuration and claim
    runs: tuple[RunRow, ...] = ()  # every run record the report is made of
    load: tuple[LoadSweep, ...] = ()  # each load sweep: throughput bought against determinism lost
    shadow: tuple[ShadowSegment, ...] = ()  # segments of shadow traffic: what became of each request
    verify: tuple[VerifyResult, ...] = ()  # servediff verify results given to the report (--verify)

    @property
    def comparisons(self) -> tuple[Comparison, ...]:
        return (*self.controls, *self.pairs)

    @property
    def uncontrolled(self) -> bool:
        """No configuration was run twice: neither an identity control nor a KL noise floor."""
        return not self.controls and not any(k.kind == "control" for k in self.kl)

    @property
    def errors_left_out(self) -> int:
        return sum(c.errors for c in self.comparisons)

    @property
    def missing_left_out(self) -> int:
        """Of errors_left_out: items a run has not reached yet, not engine errors."""
        return sum(c.missing for c in self.comparisons)

    @property
    def gapped(self) -> int:
        """Divergences between configurations with A's gap known (the gap histogram's count)."""
        return sum(gapped(c.divergences) for c in self.pairs)

    @property
    def flagged(self) -> tuple[Claim, ...]:
        return tuple(c for c in self.claims if c.flagged)

    @property
    def speed_vs_quality(self) -> tuple[Verdict, ...]:
        """Configurations with both a speedup and a paired accuracy difference (the HTML plot)."""
        return tuple(v for v in self.verdicts if v.speedup is not None and v.quality)

    @property
    def sweep_speed(self) -> tuple[SpeedRow, ...]:
        """Load-sweep levels with a throughput (the throughput-vs-concurrency plot)."""
        return tuple(s for s in self.speed if s.sweep is not None and s.tokens_per_s is not None)
