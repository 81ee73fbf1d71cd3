"""What ``servediff verify`` writes (``--out verify.json``): the verdict, the plan, the signals and
the evidence, validated by pydantic at the file boundary so that the report reads it back as typed.

    servediff verify --reference ref1.jsonl ref2.jsonl --base-url URL --out verify.json
    servediff report runs/*.jsonl --verify verify.json

Here in ``compare/`` (not beside the command) because the report lays it out, and the report sits
below the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

Verdict = Literal["consistent", "differs", "inconclusive", "plan"]
EXIT_CODES: dict[Verdict, int] = {"consistent": 0, "differs": 1, "inconclusive": 2, "plan": 0}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Signal(_Model):
    statistic: str
    what: str
    reference: bool  # the reference's runs recorded it (so it has a null)
    endpoint: bool | None  # the endpoint gave it on some request (None: not asked yet: a plan)
    note: str | None = None  # why it is unavailable, where that needs saying
    tested: bool = True  # False: reported as evidence only (compare.verify.TESTED)


class PlanRow(_Model):
    """Simulated audits at one shift δ (nats per token): the requests (and tokens, at the
    reference's mean completion length) after which ``power`` of them had said "differs"."""

    delta: float
    requests: int | None  # None: not within the horizon
    tokens: int | None
    rejected_at_horizon: float


class Plan(_Model):
    alpha: float
    power: float
    runs: int  # simulated audits per row
    horizon: int  # requests simulated per audit
    false_alarms: float  # share of the unshifted audits that said "differs"
    false_alarm_requests: int  # over this many requests each (the held-out items, each once)
    tokens_per_request: float
    rows: list[PlanRow]


class Request(_Model):
    item_id: str
    values: dict[str, float | None]  # statistic → its value (None: not available)
    pvalues: dict[str, float | None]
    log_wealth: float  # combined, after this request


class Evidence(_Model):
    requests: int
    identical: int
    prompt_mismatches: int
    prompt_compared: int
    first_divergence_median: float | None
    shift_early: float | None
    shift_late: float | None
    shift_mean: float | None
    distance_mean: float | None
    tokens_compared: int
    shape: str | None  # compare.verify.Shape where the verdict is "differs"


class Budget(_Model):
    requests: int
    tokens: int
    requests_sent: int
    tokens_reserved: int  # max_tokens per request sent: what was counted before sending
    tokens_generated: int


class VerifyResult(_Model):
    record: Literal["servediff-verify"] = "servediff-verify"
    verdict: Verdict
    exit_code: int
    line: str
    alpha: float
    delta: float
    power: float
    reference_files: list[str]
    reference_label: str
    calibration_pairs: int
    endpoint: str | None
    model: str | None
    # The file the endpoint's answers were read from (``verify --answers``), where they were
    # recorded before rather than sent now; None when sent, or for a plan.
    answers: str | None = None
    signals: list[Signal]
    plan: Plan
    planned_requests: int | None
    requests_at_stop: int
    tokens_at_stop: int
    log_wealth: float
    log_threshold: float
    budget: Budget | None
    evidence: Evidence | None
    requests: list[Request]
    warnings: list[str] = []


def write(result: VerifyResult, path: Path) -> None:
    path.write_text(result.model_dump_json(indent=2) + "\n", encoding="utf-8")


def read(path: Path) -> VerifyResult:
    """A verify file read back (ValueError naming the file and the first bad field)."""
    from pydantic import ValidationError

    try:
        return VerifyResult.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "(file)"
        raise ValueError(f"{path}: {where}: {first['msg']}") from None
