"""``servediff audit``: from the flags to the analysis (records first, verdict from the records).

    servediff audit --base-url http://127.0.0.1:8080 --control-url http://127.0.0.1:8081
    servediff audit --experiment audit.toml --promise promise --control control
    servediff audit --from audit-runs/

The promise runs first; when it already diverged the control is not run (the verdict is 'fail'
whatever the control does). The verdict is always computed from the records on disk; each
record's SHA-256 is written beside them (``SEAL``), and ``--from`` refuses records that changed
since.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from servediff.audit.conduct import ROLES, AuditOptions, Target, launched_target, run_target
from servediff.audit.workload import PlanOptions
from servediff.compare.audit import AuditAnalysis, analyze, side
from servediff.hashing import file_sha256
from servediff.records import read_run
from servediff.types import SamplingParams


class UsageProblem(ValueError):
    """Flags that do not name one audit: exit 2 before anything runs."""


def options(args: argparse.Namespace) -> AuditOptions:
    plan = PlanOptions(args.trials, args.repeats, args.rounds, args.seed, args.max_prefix)
    sampling = SamplingParams(
        temperature=args.temperature,
        seed=args.sampling_seed,
        max_tokens=args.max_tokens,
        top_logprobs=args.top_logprobs,
    )
    return AuditOptions(
        args.out,
        args.workload,
        args.levels,
        plan,
        sampling,
        args.model,
        float(args.timeout),
        not args.no_progress,
    )


# Each record's SHA-256 as the audit that wrote it left it: ``--from`` refuses records that
# changed since, rather than warn: an edited control text once turned the verdict to pass, exit
# 0, and a warning on stderr is lost in CI while the exit code is what the job acts on.
SEAL = "records.sha256.json"


def _paths(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder of audit records")
    paths = sorted(p for role in ROLES for p in (folder / role).glob("*.jsonl"))
    if not paths:
        raise ValueError(f"{folder}: no audit records (expected promise/*.jsonl and control/*.jsonl)")
    return paths


def records(folder: Path, confidence: float = 0.95) -> AuditAnalysis:
    """The verdict from an audit's records."""
    return analyze([read_run(p) for p in _paths(folder)], confidence)


def seal(folder: Path) -> None:
    """Writes each record's SHA-256 (``SEAL``), as the audit that just ran leaves them."""
    digests = {p.relative_to(folder).as_posix(): file_sha256(p) for p in _paths(folder)}
    (folder / SEAL).write_text(json.dumps(digests, indent=2) + "\n", encoding="utf-8")


def check_seal(folder: Path) -> None:
    """Raises UsageProblem (exit 2) when a record changed, appeared or went since the audit
    wrote ``SEAL``; says so on stderr where there is no seal (records from before it existed)."""
    paths = _paths(folder)
    try:
        sealed: dict[str, str] = json.loads((folder / SEAL).read_text(encoding="utf-8"))
    except FileNotFoundError:
        print(f"audit: warning: {folder / SEAL} is missing: the records cannot be checked against what "
              "the audit wrote", file=sys.stderr)  # fmt: skip
        return
    except ValueError as exc:
        raise UsageProblem(f"{folder / SEAL}: not a JSON object of SHA-256s ({exc})") from None
    now = {p.relative_to(folder).as_posix(): p for p in paths}
    changed = [name for name, p in now.items() if name in sealed and file_sha256(p) != sealed[name]]
    added = sorted(set(now) - set(sealed))
    gone = sorted(set(sealed) - set(now))
    problems = [f"{n} changed" for n in changed] + [f"{n} added" for n in added] + [f"{n} gone" for n in gone]
    if problems:
        raise UsageProblem(
            f"{folder / SEAL}: {len(problems)} record(s) differ from what the audit wrote "
            f"({'; '.join(problems[:3])}{'; …' if len(problems) > 3 else ''}): the verdict would come from "
            "other records than were audited; re-run the audit, or remove the file to recompute from "
            "the records as they are"
        )


def check(args: argparse.Namespace) -> str:
    """Which audit the flags name: 'from', 'urls' or 'experiment'; a usage problem otherwise."""
    modes = (("from", args.from_dir), ("urls", args.base_url), ("experiment", args.experiment),
             ("print", args.print_experiment))  # fmt: skip
    given = [m for m, on in modes if on]
    if len(given) != 1:
        raise UsageProblem(
            "give one of --base-url (with --control-url), --experiment, --from or --print-experiment"
        )
    mode = given[0]
    if mode == "urls" and not args.control_url:
        raise UsageProblem(
            "--control-url is required: a negative control (a server expected to diverge) is mandatory, "
            "since a pass without one proves nothing"
        )
    if mode == "print" and not (args.profile and args.model):
        raise UsageProblem("--print-experiment needs --profile ENGINE and --model MODEL")
    if mode == "experiment" and not (args.promise and args.control):
        raise UsageProblem("--experiment needs --promise LABEL and --control LABEL")
    if args.label == args.control_label:
        raise UsageProblem(f"both sides are labelled {args.label!r}: give --label/--control-label")
    return mode


def run(args: argparse.Namespace) -> AuditAnalysis:
    mode = check(args)
    if mode == "from":
        check_seal(args.from_dir)
        return records(args.from_dir, args.confidence)
    opts = options(args)
    if mode == "urls":
        run_target(Target("promise", args.label, args.base_url), opts)
        if not _promise_failed(opts.out):
            run_target(Target("control", args.control_label, args.control_url), opts)
    else:
        # One configuration at a time: engines that share a GPU cannot overlap.
        with launched_target(args.experiment, args.promise, "promise", args.out) as target:
            run_target(target, opts)
        if not _promise_failed(opts.out):
            with launched_target(args.experiment, args.control, "control", args.out) as target:
                run_target(target, opts)
    seal(args.out)
    return records(args.out, args.confidence)


def _promise_failed(out: Path) -> bool:
    """Did the promise already diverge? Then the verdict is 'fail' whatever the control does, and
    its run is skipped (the report says so): on a rented GPU that is half the time."""
    promise = side("promise", [read_run(p) for p in sorted((out / "promise").glob("*.jsonl"))])
    if promise.divergent:
        print(f"audit: the promise diverged in {promise.divergent} of {promise.trials} trials; "
              "the negative control is not needed and is skipped", file=sys.stderr)  # fmt: skip
    return promise.divergent > 0
