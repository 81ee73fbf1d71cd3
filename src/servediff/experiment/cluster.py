"""The Ray executor: each configuration of an experiment is a Ray task with the resources it
declares; Ray places it on a node, where it starts, checks, runs, probes and stops its engine
with the same code as the local executor. Independent configurations run in parallel.

    servediff experiment examples/ray-replicas.toml --executor ray [--ray-address ADDR]

Records come back to this machine's output folder: by default a worker runs in a scratch
folder seeded with the files it resumes from, and streams every complete line it appends (and
every header it rewrites) to the driver, which writes it into the output folder; with
``[executor] records = "shared"`` the workers write into the output folder themselves (a
filesystem every node mounts). Only complete lines travel, so a lost worker leaves records that
a re-run resumes. Probes need both runs of a pair, so they are taken in a second round, once
every configuration has run.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servediff.experiment.cluster_spec import Executor
from servediff.experiment.conductor import Job, Outcome, probe_again, run_configuration
from servediff.experiment.placement import place
from servediff.experiment.spec import ConfigSpec
from servediff.experiment.tail import Tail, apply
from servediff.filename import file_stem

POLL_S = 0.3
Event = tuple[str, str, Any]  # (kind, path relative to the output folder, payload)


def connect(executor: Executor) -> None:
    """Join the cluster at ``executor.address``; the one this process already joined; or a
    local one started here."""
    import ray

    if ray.is_initialized():
        return
    ray.init(address=executor.address, include_dashboard=False, log_to_driver=True)


def ray_executor(executor: Executor) -> Any:
    """The executor function ``run_experiment`` takes."""

    def run(job: Job, outcome: Outcome) -> None:
        connect(executor)
        labels = [c.label for c in job.exp.configurations]
        _round(job, executor, labels, "run", outcome)
        _round(job, executor, labels, "probe", outcome)

    return run


@dataclass
class _Round:
    """One round of tasks (runs, or probes) and what the threads that follow them collect."""

    job: Job
    executor: Executor
    phase: str
    outcome: Outcome
    failures: list[BaseException] = field(default_factory=list)
    streams: list[Any] = field(default_factory=list)


def _round(job: Job, executor: Executor, labels: list[str], phase: str, outcome: Outcome) -> None:
    """One task per configuration, all at once (Ray queues what does not fit), each streamed
    into the output folder by a thread of its own."""
    import ray

    state = _Round(job, executor, phase, outcome)
    threads = [
        threading.Thread(target=_drive, args=(state, job.exp.config(label)), name=f"ray-{label}", daemon=True)
        for label in labels
        if label not in outcome.lost
    ]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except BaseException:  # Ctrl-C: end the tasks; their servers die with their workers
        for stream in state.streams:
            ray.cancel(stream, force=True)
        raise
    if state.failures:
        raise state.failures[0]


def _drive(state: _Round, config: ConfigSpec) -> None:
    import ray

    task = ray.remote(configuration_task).options(
        num_cpus=config.resources.num_cpus,
        num_gpus=config.resources.num_gpus,
        resources=dict(config.resources.custom),
        max_retries=0,  # a lost worker is reported and resumed by a re-run, not silently redone
        name=f"servediff:{config.label}:{state.phase}",
    )
    job, outcome = state.job, state.outcome
    seed = None if state.executor.records == "shared" else seed_files(job, config)
    stream: Any = task.remote(job, config.label, state.phase, seed)
    state.streams.append(stream)
    try:
        for ref in stream:
            kind, rel, payload = ray.get(ref)
            if kind == "outcome":
                _merge(outcome, job.exp.output, payload)
            else:
                apply(job.exp.output, kind, rel, payload)
    except ray.exceptions.RayTaskError as exc:  # the configuration itself failed: as locally
        state.failures.append(exc.cause if isinstance(exc.cause, BaseException) else exc)
    except ray.exceptions.RayError as exc:  # the worker or its node is gone
        outcome.lost.append(config.label)
        outcome.errors += 1
        print(
            f"[{config.label}] worker lost ({type(exc).__name__}): its unfinished runs are left "
            "incomplete; re-run the experiment to resume them",
            file=sys.stderr,
            flush=True,
        )


def _merge(outcome: Outcome, output: Path, part: dict[str, Any]) -> None:
    outcome.ran += [output / p for p in part["ran"]]
    outcome.skipped += [output / p for p in part["skipped"]]
    outcome.probed += [output / p for p in part["probed"]]
    outcome.errors += part["errors"]
    outcome.probe_errors += part["probe_errors"]


def seed_files(job: Job, config: ConfigSpec) -> dict[str, bytes]:
    """What a worker resumes from: the configuration's runs, replica checks, probes and logs,
    and both runs of every pair it probes."""
    exp = job.exp
    slots, probes = job.mine(config.label)
    paths = {s.path for s in slots} | {p.path for p in probes}
    paths |= {run.path for p in probes for run in (p.a, p.b)}
    name = f"{file_stem(config.label)}.{config.digest}"
    for pattern in (f"replicas/{name}/*", f"logs/{name}*.log"):
        paths |= set(exp.output.glob(pattern))
    out = {}
    for path in sorted(p for p in paths if p.is_file()):
        rel, data = str(path.relative_to(exp.output)), path.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]
        if complete != data:
            # A cut last line (a killed writer): dropped here and in the worker's copy alike, so
            # that the lines the worker appends continue both; its item runs again.
            print(f"warning: {path}: dropped a cut last line; its item runs again", file=sys.stderr)
            apply(exp.output, "put", rel, complete)
        out[rel] = complete
    return out


# --- on the worker ---------------------------------------------------------------------------
def where() -> dict[str, Any]:
    """The node this task runs on and the GPUs Ray gave it (CUDA_VISIBLE_DEVICES is set to them,
    and a launched server inherits it)."""
    import ray

    context = ray.get_runtime_context()
    return {
        "executor": "ray",
        "node_id": context.get_node_id(),
        "node_ip": ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call]
        "hostname": socket.gethostname(),
        "gpus": [str(g) for g in ray.get_gpu_ids()],
        "worker_pid": os.getpid(),
    }


def configuration_task(job: Job, label: str, phase: str, seed: dict[str, bytes] | None) -> Iterator[Event]:
    """A Ray generator task: run (or probe) one configuration, yielding what it writes."""
    scratch = Path(tempfile.mkdtemp(prefix="servediff-")) if seed is not None else None
    if scratch is not None:
        for rel, data in (seed or {}).items():
            apply(scratch, "put", rel, data)
        job = _rebased(job, scratch)
    outcome = Outcome()
    errors: list[BaseException] = []
    worker = threading.Thread(target=_work, args=(job, label, phase, outcome, errors, where()), daemon=True)
    tail = Tail(scratch, seed or {}) if scratch is not None else None
    worker.start()
    try:
        while worker.is_alive():
            worker.join(POLL_S)
            if tail is not None:
                yield from tail.poll()
        if errors:
            raise errors[0]
        yield "outcome", "", _relative(outcome, job.exp.output)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _work(
    job: Job, label: str, phase: str, outcome: Outcome, errors: list[BaseException], at: dict[str, Any]
) -> None:
    place(at)  # this thread's context: run headers record it, servers die with the worker
    config = job.exp.config(label)
    try:
        if phase == "run":
            # probes wait for the second round: the other side's runs may still be running
            run_configuration(job.exp, config, job.mine(label)[0], [], job.suites, outcome, False)
        else:
            probe_again(job, config, outcome)
    except BaseException as exc:
        errors.append(exc)


def _rebased(job: Job, scratch: Path) -> Job:
    """The job with every path moved from the output folder into the worker's scratch folder."""
    exp = dataclasses.replace(job.exp, output=scratch)

    def moved(path: Path) -> Path:
        return scratch / path.relative_to(job.exp.output)

    slots = [dataclasses.replace(s, path=moved(s.path)) for s in job.slots]
    by_path = {s.path: m for s, m in zip(job.slots, slots)}
    probes = [
        dataclasses.replace(p, a=by_path[p.a.path], b=by_path[p.b.path], path=moved(p.path))
        for p in job.probes
    ]
    return Job(exp, slots, probes, job.suites, job.progress)


def _relative(outcome: Outcome, output: Path) -> dict[str, Any]:
    def rel(paths: list[Path]) -> list[str]:
        return [str(p.relative_to(output)) for p in paths]

    return {
        "ran": rel(outcome.ran),
        "skipped": rel(outcome.skipped),
        "probed": rel(outcome.probed),
        "errors": outcome.errors,
        "probe_errors": outcome.probe_errors,
        "at": time.time(),
    }
