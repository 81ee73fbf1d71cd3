"""The report model: every number any output shows, computed once from (Study, ReportOptions).

    servediff compare runs/*.jsonl --md report.md --json      # both render this one object

``build`` turns the records (grouped into a Study) and the report options into a frozen
``Report``. ``report.md``, ``report.html``, ``summary.json`` render it and compute nothing:
the Markdown and HTML templates only format, with the shared formats of ``report.fmt``, and
``summary.json`` is the model's own serialisation (``report.render.summary``). A new kind of
evidence is a new field here first, then a block in each template.
"""

from __future__ import annotations

from dataclasses import dataclass

from servediff.compare.comparison import Comparison
from servediff.compare.hazard import HazardView
from servediff.compare.load import LoadSweep
from servediff.compare.quality import Accuracy, PairQuality
from servediff.compare.runs import RunRow
from servediff.compare.sampled import Sampled
from servediff.compare.shadow import ShadowSegment
from servediff.compare.speed import Interval, Load
from servediff.compare.sweep import Sweep
from servediff.compare.vocabulary import DesignKind, Kind, QualityVerdict

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
class Sampling:
    temperature: float | None  # None: not recorded (an import)
    seed: int | None
    max_tokens: int
    top_logprobs: int
    enable_thinking: bool | None
    top_p: float = 1.0
    top_k: int = 0
    samples: int = 1  # draws per item (sampled runs)
    # None: not sent (a record from before they were), so the server applied its own default
    repeat_penalty: float | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None


@dataclass(frozen=True, slots=True)
class SuiteMethod:
    name: str
    version: str
    source: str
    items: int
    content_sha256: str
    data_sha256: str
    sampling: Sampling
    concurrency: int
    prompt_form: str  # "chat messages", "raw prompt" or "prompt with the chat template applied"
    runs: tuple[tuple[str, int], ...]  # (label, repeats)


@dataclass(frozen=True, slots=True)
class Tool:
    version: str
    git_revision: str | None
    python: str
    platform: str
    created: str


@dataclass(frozen=True, slots=True)
class Changed:
    """A scored item right under one configuration and wrong under the other."""

    suite: str
    a: str
    b: str
    item_id: str
    subject: str | None
    gold: str | None
    a_answer: str | None
    b_answer: str | None
    a_correct: bool


@dataclass(frozen=True, slots=True)
class SubjectAgreement:
    subject: str
    n: int
    same_answer: int
    a_correct: int
    b_correct: int


@dataclass(frozen=True, slots=True)
class Subjects:
    suite: str
    a: str
    b: str
    rows: tuple[SubjectAgreement, ...]


@dataclass(frozen=True, slots=True)
class QualityView:
    margin: float
    accuracies: tuple[Accuracy, ...]
    pairs: tuple[PairQuality, ...]  # controls and pairs of scored runs
    chance: tuple[tuple[str, str, float], ...]  # (label, suite, chance): not above chance
    changed: tuple[Changed, ...]  # over the pairs (not the controls)
    subjects: tuple[Subjects, ...]


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


# --- speed (what the tuning bought) -------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SpeedView:
    """One configuration's speed on one suite, warm-up and errored items left out and counted."""

    suite: str
    label: str
    sweep: str | None  # the load sweep this level belongs to (its base label), None: not a sweep
    concurrency: int
    runs: int
    items: int  # items the numbers are made of (over all repeats)
    warmup: int  # left out as warm-up
    errors: int  # left out: the engine failed
    in_flight: float | None  # mean requests in flight (Σ latency / wall)
    tokens_per_s: Interval | None  # output tokens/s (None: no timestamps at concurrency > 1)
    requests_per_s: Interval | None
    latency: tuple[Interval, ...]  # p50, p90, p99 in seconds
    ttft: tuple[Interval, ...]  # p50, p90, p99 time to first token (empty: not measured)
    itl: Interval | None  # mean inter-token latency (seconds)
    engine_tokens_per_s: float | None  # the engine's own decode rate, where it reported one
    reference: str | None  # the configuration the speedup is against (None: this is it)
    speedup: Interval | None
    load: Load | None = None  # the machine's load under both (None: this is the reference)


@dataclass(frozen=True, slots=True)
class QualityDelta:
    suite: str
    delta: float
    low: float
    high: float
    verdict: QualityVerdict
    margin: float


@dataclass(frozen=True, slots=True)
class Verdict:
    """The one line per configuration: speed, identity, quality, verification."""

    label: str
    reference: str | None  # None: the reference configuration itself
    concurrency: int
    speedup: Interval | None  # output tokens/s against the reference, over every suite's items
    tokens_per_s: Interval | None  # this configuration's own rate, over every suite's items
    identity: tuple[tuple[str, int, int], ...]  # (suite, identical, compared): against the reference
    control: tuple[tuple[str, int, int], ...]  # (suite, identical, compared): against its repeat
    quality: tuple[QualityDelta, ...]
    verification: str | None  # None: nothing was checked
    load: Load | None = None  # the machine's load under it and the reference (None: reference)


# -----------------------------------------------------------------------------------------------
# --- factors: which change did it (experiments with a factor design) ----------------------------
@dataclass(frozen=True, slots=True)
class FactorCell:
    """One combination of factors against the control, on one suite."""

    label: str
    on: tuple[str, ...]
    identical: int
    total: int
    errors: int
    hazard: HazardView | None
    quality: PairQuality | None  # scored suites: the combination minus the control
    prompt_tokens: int
    cached_tokens: int | None  # prompt tokens reused from the KV cache (None: not recorded)


@dataclass(frozen=True, slots=True)
class FactorRow:
    factor: str
    alone: FactorCell | None
    without: FactorCell | None  # every factor but this one
    prevents: int | None  # items diverging with all factors that do not without this one
    diverging_with_all: int | None
    sole: tuple[str, ...]  # items this factor alone is established to cause


@dataclass(frozen=True, slots=True)
class ItemCauseView:
    item_id: str
    diverges_under: tuple[str, ...]
    smallest: tuple[tuple[str, ...], ...]
    established: bool
    untried: tuple[tuple[str, ...], ...]  # factor sets that would settle it; not run
    masked: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AttributionView:
    suite: str
    design: DesignKind
    control: str
    factors: tuple[str, ...]
    control_deterministic: bool | None
    cells: tuple[FactorCell, ...]
    rows: tuple[FactorRow, ...]
    items: tuple[ItemCauseView, ...]
    interactions: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]  # (factors, items)
    missing: tuple[tuple[str, ...], ...]  # combinations the design runs with no record here


@dataclass(frozen=True, slots=True)
class KlRow:
    """Two scoring runs of the same sequences: the teacher-forced divergence of B from A.

    ``kind`` "control" is a configuration against its own repeat (the noise floor), "pair" two
    configurations. KL is the top-k + tail value (a lower bound of the full-vocabulary KL);
    intervals are 95 % bootstraps over sequences. ``checkpoint_*`` name each side's weights.
    """

    suite: str
    a: str
    b: str
    kind: Kind
    checkpoint_a: str
    checkpoint_b: str
    top_k: int
    sequences: int
    positions: int
    kl_mean: Interval
    kl_max: float
    kl_percentiles: tuple[tuple[float, float], ...]  # (percentile, KL), 99.9 down to 0.1
    same_top1: Interval
    dp_mean: Interval
    dp_rms: float
    ln_ppl_ratio: Interval
    # Per-position KL as a log-binned histogram (compare.kl.log_histogram): the HTML plot's data.
    kl_hist_edges: tuple[float, ...] = ()
    kl_hist_counts: tuple[int, ...] = ()

    @property
    def predicted_flip_rate(self) -> float:
        """1 − same-top-1: on an on-policy corpus, how often B's greedy pick would leave A's path."""
        return 1.0 - self.same_top1.value


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
    quality: QualityView | None
    matrices: tuple[Matrix, ...]
    claims: tuple[Claim, ...]
    sweeps: tuple[Sweep, ...]
    limitations: tuple[str, ...]
    # Speed: per (suite, configuration), and the one-line verdicts that open the Summary.
    speed: tuple[SpeedView, ...] = ()
    verdicts: tuple[Verdict, ...] = ()
    warmup: int = 1  # items per run left out of every speed number
    attribution: tuple[AttributionView, ...] = ()  # one per suite of a factor design
    kl: tuple[KlRow, ...] = ()  # teacher-forced divergence of scoring runs (controls first)
    sampled: Sampled | None = None  # pass rates over k draws per item (temperature > 0 runs)
    placements: tuple[Placement, ...] = ()  # runs a cluster executor placed
    replica_checks: tuple[ReplicaCheck, ...] = ()  # configurations served by several replicas
    claim_groups: tuple[ClaimGroup, ...] = ()  # the claims, one row per configuration and claim
    runs: tuple[RunRow, ...] = ()  # every run record the report is made of
    load: tuple[LoadSweep, ...] = ()  # each load sweep: throughput bought against determinism lost
    shadow: tuple[ShadowSegment, ...] = ()  # segments of shadow traffic: what became of each request

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
        return sum(1 for c in self.pairs for d in c.divergences if d.a is not None and d.a.gap is not None)

    @property
    def flagged(self) -> tuple[Claim, ...]:
        return tuple(c for c in self.claims if c.flagged)

    @property
    def speed_vs_quality(self) -> tuple[Verdict, ...]:
        """Configurations with both a speedup and a paired accuracy difference (the HTML plot)."""
        return tuple(v for v in self.verdicts if v.speedup is not None and v.quality)

    @property
    def sweep_speed(self) -> tuple[SpeedView, ...]:
        """Load-sweep levels with a throughput (the throughput-vs-concurrency plot)."""
        return tuple(s for s in self.speed if s.sweep is not None and s.tokens_per_s is not None)
