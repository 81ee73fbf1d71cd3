"""Run an experiment: one configuration at a time, start its engine, verify it, run the suites,
the control repeats and the load sweep, stop it; then compare everything and write the report.

    servediff experiment examples/llamacpp-flash.toml

Every (configuration, suite, repeat) is one record file whose name carries a hash of the
configuration's definition: re-running skips complete files (a configuration whose runs are all
complete is not even started), resumes partial ones, and a changed definition gets new files
without touching the other configurations' runs.

That is the local executor (``sequential``); ``run_experiment`` takes another, such as the Ray
executor of ``experiment.cluster``, which runs the same ``run_configuration`` on cluster nodes.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from servediff.compare.divergence import divergence_points
from servediff.experiment.factors import header as factor_header
from servediff.experiment.ledger import end_survivors
from servediff.experiment.placement import placed
from servediff.experiment.plan import BLOCK, Slot, alternated, interleaved, ordered, plan_slots
from servediff.experiment.probing import ProbeSlot, pending, plan_probes
from servediff.experiment.replica_check import check_due, check_replicas
from servediff.experiment.reporting import write_report
from servediff.experiment.session import LEDGER, Session, renders_chat, say, session, template_path
from servediff.experiment.source import ExperimentError
from servediff.experiment.spec import ConfigSpec, Experiment, SuiteSpec
from servediff.probe import probe_sides
from servediff.records import RecordError, Run, annotate, read_run
from servediff.report.model import Report
from servediff.report.wording import flag_line, replica_line
from servediff.runner import RunPlan, RunResult, execute
from servediff.suites import Suite, SuiteOptions, load_suite
from servediff.suites.draws import expand
from servediff.types import SamplingParams


@dataclass
class Outcome:
    """What the experiment did, for the CLI's exit code and message."""

    report: Path | None = None
    ran: list[Path] = dataclasses.field(default_factory=list)
    skipped: list[Path] = dataclasses.field(default_factory=list)
    errors: int = 0
    flags: list[str] = dataclasses.field(default_factory=list)
    probed: list[Path] = dataclasses.field(default_factory=list)
    probe_errors: int = 0
    notes: list[str] = dataclasses.field(default_factory=list)
    lost: list[str] = dataclasses.field(default_factory=list)  # configurations whose worker was lost
    model: Report | None = None  # what the report shows, for the CLI's closing summary


def is_complete(slot: Slot, suite: Suite) -> bool:
    if not slot.path.is_file():
        return False
    try:
        run = read_run(slot.path)
    except RecordError:
        return False
    return {s.id for s in suite.samples} <= run.done_ids()


def load_suites(exp: Experiment) -> dict[str, Suite]:
    out = {}
    for spec in exp.suites:
        try:
            out[spec.name] = load_suite(
                spec.name,
                SuiteOptions(
                    limit=spec.limit,
                    seed=spec.seed,
                    path=spec.path,
                    allow_code_execution=spec.allow_code_execution,
                ),
            )
        except (ValueError, FileNotFoundError) as exc:
            raise ExperimentError(f"{exp.path}: suite {spec.name!r}: {exc}") from exc
    return out


def sampling_for(exp: Experiment, spec: SuiteSpec, suite: Suite) -> SamplingParams:
    # Precedence: the suite's table, then [sampling] when it sets max_tokens, then the suite's own default.
    explicit = "max_tokens" in exp.raw.get("sampling", {})
    tokens = spec.max_tokens or (exp.sampling.max_tokens if explicit else suite.max_tokens) or 300
    top_k = max(exp.sampling.top_logprobs, suite.top_logprobs)  # what a logprob scorer reads
    return dataclasses.replace(exp.sampling, max_tokens=tokens, top_logprobs=top_k)


# --- one configuration -----------------------------------------------------------------------
def run_configuration(
    exp: Experiment,
    config: ConfigSpec,
    slots: list[Slot],
    probes: list[ProbeSlot],
    suites: dict[str, Suite],
    outcome: Outcome,
    progress: bool,
) -> None:
    """Start the configuration's engine if it has runs to make or probes to take, then do them:
    runs first, then its side of every pair whose two runs now exist."""
    todo = [s for s in slots if not is_complete(s, suites[s.suite.name])]
    # complete before this invocation: not the runs it made already (the interleaved ABBA blocks)
    outcome.skipped += [s.path for s in slots if s not in todo and s.path not in outcome.ran]
    unchecked = any(check_due(s) for s in slots)
    if not unchecked and not todo and not any(pending(p, exp.probes.k) for p in probes):
        say(f"[{config.label}] all {len(slots)} run(s) complete: not started")
        return
    with session(exp, config) as live:
        for slot in todo:
            run_slot(exp, live, slot, suites[slot.suite.name], outcome, progress)
        for slot in (s for s in slots if check_due(s)):
            engines = live.replica_engines(slot)
            found = check_replicas(slot_plan(exp, slot, suites[slot.suite.name]), slot, engines, progress)
            annotate(slot.path, {"replica_check": {**found, "urls": list(live.base_urls)}})
        take_probes(live, due(probes, exp.probes.k), outcome, progress)


def slot_plan(exp: Experiment, slot: Slot, suite: Suite) -> RunPlan:
    extra: dict[str, Any] = {
        "experiment": {"file": exp.path.name, "definition_sha256": slot.config.digest, "sweep": slot.sweep}
    }
    if exp.design is not None and slot.config.factors is not None and not slot.sweep:
        # the report attributes divergences to factors from the records alone
        extra["experiment"]["factors"] = factor_header(exp.design, slot.config.factors)
    return RunPlan(
        suite,
        slot.label,
        slot.path,
        sampling_for(exp, slot.suite, suite),
        repeat=slot.repeat,
        concurrency=slot.concurrency,
        extra=extra,
    )


def run_slot(
    exp: Experiment, live: Session, slot: Slot, suite: Suite, outcome: Outcome, progress: bool
) -> None:
    engine = live.engine(slot)
    plan = slot_plan(exp, slot, suite)
    try:
        before = live.snapshot()
        result = execute(plan, engine, progress=progress)
        after = live.snapshot()
    finally:
        engine.close()
    finish_slot(live, slot, result, outcome, (before, after))


def finish_slot(
    live: Session, slot: Slot, result: RunResult, outcome: Outcome, counters: tuple[Any, Any] = (None, None)
) -> None:
    """Note what a finished run verified and where it ran, in its header and the outcome."""
    verification = live.verification(*counters, result, slot)
    where = placed()  # the cluster node and GPUs it ran on, when it ran on a cluster
    annotate(slot.path, {"verification": verification, **({"placement": where} if where else {})})
    outcome.ran.append(slot.path)
    outcome.errors += result.errors
    say(
        f"[{slot.label}] {slot.suite.name} #{slot.repeat}: {result.done} done, "
        f"{result.skipped} already finished, {result.errors} failed"
    )


def probe_slot(live: Session, slot: ProbeSlot, runs: tuple[Run, Run], progress: bool) -> tuple[int, int]:
    """Probe one side with the live engine of its configuration; (probes written, failed)."""
    points = divergence_points(*runs)
    prober, template_source = live.prober(slot.a if slot.side == "a" else slot.b, points)
    with prober:
        ps = probe_sides(
            runs,
            {slot.side: prober},
            slot.path,
            k=live.exp.probes.k,
            identities={slot.side: prober.identity()},
            template_source=template_source,
            progress=progress,
        )
    failed = sum(1 for e in ps.entries.values() if e.error)
    return len(ps.entries), failed


def due(probes: list[ProbeSlot], k: int) -> list[tuple[ProbeSlot, tuple[Run, Run]]]:
    """The probes that still need taking, each with the pair's runs (read once)."""
    return [(p, runs) for p in probes if (runs := pending(p, k)) is not None]


def take_probes(
    live: Session, work: list[tuple[ProbeSlot, tuple[Run, Run]]], outcome: Outcome, progress: bool
) -> None:
    for slot, runs in work:
        written, failed = probe_slot(live, slot, runs, progress)
        outcome.probed.append(slot.path)
        outcome.probe_errors += failed
        say(f"[{slot.config.label}] probed {slot.name}: {written} divergence(s), {failed} failed")


# --- the whole experiment --------------------------------------------------------------------
@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so the engine that is up gets stopped, not orphaned."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@dataclass(frozen=True)
class Job:
    """Everything an executor needs to run an experiment's configurations."""

    exp: Experiment
    slots: list[Slot]
    probes: list[ProbeSlot]
    suites: dict[str, Suite]
    progress: bool

    def mine(self, label: str) -> tuple[list[Slot], list[ProbeSlot]]:
        """A configuration's runs and its sides of the probes."""
        return [s for s in self.slots if s.config.label == label], [
            p for p in self.probes if p.config.label == label
        ]


def sequential(job: Job, outcome: Outcome) -> None:
    """The default executor: one configuration at a time on this machine; first, where they can
    all be up at once (in-process engines), the runs speed is measured on, interleaved."""
    exp = job.exp
    interleave(job, outcome)
    alternate(job, outcome)
    for config in ordered(exp):
        slots, probes = job.mine(config.label)
        run_configuration(exp, config, slots, probes, job.suites, outcome, job.progress)
    # The control's side of each pair could only be probed once the others had run.
    for config in ordered(exp):
        probe_again(job, config, outcome)


def alternate(job: Job, outcome: Outcome) -> None:
    """With ``speed_repeats`` of two or more and configurations that cannot all be up at once
    (servers): the repeats of every suite in A B B A order (``plan.alternated``), each run on a
    fresh start of its server, so that each configuration's repeats span the experiment and a
    drift of the machine falls on all of them alike. The load each run saw is recorded as for
    any run (the report's load check compares them). What is left (control repeats beyond the
    speed repeats, sweeps, probes) follows configuration by configuration as before.

    Not both servers up with their requests interleaved: servers that share a machine measure
    each other (the 0.5B draft against stock on one H200: 0.55× alone, 0.77× with four servers
    sharing the GPU, docs/studies/qwen-gpu.md), and two may not fit on one accelerator."""
    exp = job.exp
    configs = ordered(exp)
    if exp.speed_repeats < 2 or len(configs) < 2 or all(c.kind == "embedded" for c in configs):
        return
    say(f"[{exp.title}] {len(configs)} configurations × {exp.speed_repeats} repeats, alternated (ABBA)")
    for label, repeat in alternated([c.label for c in configs], exp.speed_repeats):
        slots = [s for s in job.slots if s.label == label and s.repeat == repeat and not s.sweep]
        todo = [s for s in slots if not is_complete(s, job.suites[s.suite.name])]
        if not todo:
            continue
        with session(exp, exp.config(label)) as live:
            for slot in todo:
                run_slot(exp, live, slot, job.suites[slot.suite.name], outcome, job.progress)


def interleave(job: Job, outcome: Outcome) -> None:
    """Every configuration's runs of each suite (the first, and every speed repeat), in ABBA
    blocks (``plan.interleaved``), when the configurations can all be up at once: in-process
    engines only, as servers may not fit beside each other. Repeats alternate the order too
    (A B … on odd repeats, … B A on even ones). Their control repeats, sweeps and probes follow
    configuration by configuration as before; the interleaved runs are then complete and skipped."""
    configs = ordered(job.exp)
    if len(configs) < 2 or any(c.kind != "embedded" for c in configs):
        return
    for spec in job.exp.suites:
        for repeat in range(1, job.exp.speed_repeats + 1):
            _interleave_suite(job, spec, repeat, outcome)


def _interleave_suite(job: Job, spec: SuiteSpec, repeat: int, outcome: Outcome) -> None:
    """One suite's runs of one repeat, interleaved in ABBA blocks."""
    suite = job.suites[spec.name]
    slots = [s for s in job.slots if s.suite is spec and s.repeat == repeat and not s.sweep]
    if repeat % 2 == 0:
        slots.reverse()
    if len(slots) < 2 or all(is_complete(s, suite) for s in slots):
        return
    with ExitStack() as stack:
        lives = {s.label: stack.enter_context(session(job.exp, s.config)) for s in slots}
        engines = {s.label: lives[s.label].engine(s) for s in slots}
        for engine in engines.values():
            stack.callback(engine.close)
        plans = {s.label: slot_plan(job.exp, s, suite) for s in slots}
        ids = [x.id for x in expand(suite, plans[slots[0].label].sampling).samples]
        say(f"[{spec.name}] {len(slots)} configurations interleaved in blocks of {BLOCK} (ABBA)")
        results: dict[str, list[RunResult]] = {s.label: [] for s in slots}
        for label, block in interleaved([s.label for s in slots], ids):
            results[label].append(execute(plans[label], engines[label], job.progress, frozenset(block)))
        for s in slots:
            finish_slot(lives[s.label], s, merged(results[s.label]), outcome)


def merged(parts: list[RunResult]) -> RunResult:
    """One run's result from its blocks: each execute call was asked for its block only, so
    the run's items, those finished before and those done now are the blocks' sums."""
    return RunResult(
        parts[0].path,
        sum(p.total for p in parts),
        sum(p.skipped for p in parts),
        sum(p.done for p in parts),
        sum(p.errors for p in parts),
    )


def probe_again(job: Job, config: ConfigSpec, outcome: Outcome) -> None:
    """Start a configuration once more to probe its sides of the pairs that are now due."""
    left = due(job.mine(config.label)[1], job.exp.probes.k)
    if left:
        say(f"[{config.label}] started again to probe its side of {len(left)} pair(s)")
        with session(job.exp, config) as live:
            take_probes(live, left, outcome, job.progress)


def run_experiment(
    exp: Experiment, progress: bool = True, executor: Callable[[Job, Outcome], None] = sequential
) -> Outcome:
    if exp.unfetched:  # before anything is written: a server would only fail on a missing file
        raise ExperimentError(exp.unfetched[0])
    suites = load_suites(exp)
    slots = plan_slots(exp)
    probes, notes = check_probe_templates(exp, plan_probes(exp, slots), suites)
    notes = [*exp.notes, *notes]
    outcome = Outcome(notes=notes)
    for note in notes:
        say(f"note: {note}")
    exp.output.mkdir(parents=True, exist_ok=True)
    for line in end_survivors(exp.output / LEDGER):
        say(f"warning: {line}")
    with sigterm_as_interrupt():
        executor(Job(exp, slots, probes, suites, progress), outcome)
    outcome.model = write_report(
        exp, [s.path for s in slots if s.path.is_file()], [p.path for p in probes if p.path.is_file()]
    )
    if outcome.model is not None:
        outcome.report = exp.output / "report.md"
        outcome.flags = [flag_line(c) for c in outcome.model.flagged] + [
            replica_line(c) for c in outcome.model.replica_checks if c.heterogeneous
        ]
    return outcome


def check_probe_templates(
    exp: Experiment, probes: list[ProbeSlot], suites: dict[str, Suite]
) -> tuple[list[ProbeSlot], list[str]]:
    """Before anything starts: which probes can run, and a note for each that cannot. A server
    configuration probing chat prompts needs the model's chat template; without one its probes
    are left out (the report then says the divergences had no probe) rather than failing an
    hour into the runs. A template file that is named but missing is an error."""
    keep, notes = [], []
    for p in probes:
        chat = any(s.messages for s in suites[p.suite.name].samples)
        if p.config.kind == "embedded" or not chat or renders_chat(exp, p.config):
            keep.append(p)
            continue
        path = template_path(exp, p.config)
        if path is None:
            notes.append(
                f"no probes for {p.name}: {p.config.label!r} is a server and {p.suite.name!r} has chat "
                "prompts, which need the model's chat template; set [probes] template = "
                '"path/to/tokenizer_config.json" (or a .gguf, or a Jinja file)'
            )
            continue
        if not path.exists() and not (exp.unfetched and path == exp.model_path):
            raise ExperimentError(f"{exp.path}: [probes] template: file not found: {path}")
        keep.append(p)
    return keep, notes
