"""N configurations on N slots of a Ray cluster against the sequential executor.

    .venv/bin/python bench/ray_parallel.py --configs 2 --items 6 --max-tokens 48

N llama.cpp server configurations (SmolLM2-135M-Instruct, one thread each, differing in
``--n_batch`` so that each is its own configuration) run the same prompts. Measured, in this
order, each from a fresh output folder: every configuration alone on the local executor (the
slowest of these is the floor a parallel run can reach), all of them on the local executor one
after the other, then all of them on a local Ray cluster of N CPU slots (each configuration
declares ``num_cpus = 1``). Ray's own start-up (``ray.init`` of a local cluster) and shut-down
are timed apart from the experiment. Target: Ray's wall time ≤ 1.25 × the slowest single
configuration. Times are the executor's wall (first engine start to last stop); the row "what
the executor adds" is the Ray wall minus its longest configuration's own span from the records,
which does not depend on the machine's load. Probes are off: this measures how runs are
scheduled, not what they find.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from servediff.experiment import load_experiment, run_experiment
from servediff.experiment.cluster import ray_executor
from servediff.experiment.cluster_spec import Executor
from servediff.experiment.conductor import Job, Outcome, sequential
from servediff.records import read_run

SERVER = (
    '["{python}", "-m", "llama_cpp.server", "--model", "{model_path}", "--model_alias", "{model}", '
    '"--host", "{host}", "--port", "{port}", "--n_ctx", "1024", "--seed", "42", '
    # one thread for prompts too: llama_cpp.server's --n_threads_batch defaults to every core, and
    # two servers' spinning batch threads on two cores slow each other down twofold
    '"--n_threads", "1", "--n_threads_batch", "1", "--n_batch", "%d"]'
)


def experiment_file(folder: Path, configs: int, items: int, max_tokens: int) -> Path:
    body = "".join(
        f'[[configurations]]\nlabel = "b{512 >> i}"\nlaunch = {SERVER % (512 >> i)}\n'
        "start_timeout = 120\nresources = { num_cpus = 1 }\n"
        for i in range(configs)
    )
    path = folder / "bench.toml"
    path.write_text(
        f'model = "smollm2"\ncontrol_repeats = 0\n[probes]\nenabled = false\n'
        f"[sampling]\nmax_tokens = {max_tokens}\n[suites.prompts]\nlimit = {items}\n" + body
    )
    return path


def longest_span(out: Path) -> float:
    """The longest configuration of a run, by its own records: server start-up plus the time
    from its first request to its last answer. Wall time minus this is what the executor adds."""
    spans = []
    for path in (out / "runs").glob("*/*.jsonl"):
        run = read_run(path)
        items = list(run.items.values())
        first = min((i.finished_at or 0.0) - i.latency_s for i in items)
        last = max(i.finished_at or 0.0 for i in items)
        startup = float(run.header.extra.get("verification", {}).get("startup_s", 0.0))
        spans.append(last - first + startup)
    return max(spans)


def timed_run(path: Path, out: Path, only: str | None = None, on_ray: bool = False) -> float:
    """The executor's wall time: from the first engine start to the last stop. Loading the
    suites and writing the report (which costs more for two configurations than for one: the
    pair's comparison and its plots) are outside it, the same for every side."""
    exp = load_experiment(path, output=out)
    if only is not None:
        exp = dataclasses.replace(exp, configurations=(exp.config(only),), control=only)
    executor = ray_executor(Executor(kind="ray")) if on_ray else sequential
    took: list[float] = []

    def clocked(job: Job, outcome: Outcome) -> None:
        t0 = time.perf_counter()
        executor(job, outcome)
        took.append(time.perf_counter() - t0)

    outcome = run_experiment(exp, progress=False, executor=clocked)
    if outcome.errors or outcome.lost:
        raise SystemExit(f"{out}: {outcome.errors} error(s), lost {outcome.lost}")
    return took[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", type=int, default=2)
    ap.add_argument("--items", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3, help="rounds; each runs every side once, in turn")
    args = ap.parse_args()
    import ray

    folder = Path(tempfile.mkdtemp(prefix="servediff-bench-ray-"))
    path = experiment_file(folder, args.configs, args.items, args.max_tokens)
    labels = [c.label for c in load_experiment(path).configurations]
    t0 = time.perf_counter()
    ray.init(num_cpus=args.configs, include_dashboard=False, log_to_driver=False)
    started = time.perf_counter() - t0
    walls: dict[str, list[float]] = {}
    for r in range(args.repeats):  # interleaved: a change in the machine's load falls on every side
        for label in labels:
            walls.setdefault(label, []).append(timed_run(path, folder / f"{r}-alone-{label}", only=label))
        walls.setdefault("sequential", []).append(timed_run(path, folder / f"{r}-sequential"))
        walls.setdefault("ray", []).append(timed_run(path, folder / f"{r}-ray", on_ray=True))
        walls.setdefault("ray overhead", []).append(walls["ray"][-1] - longest_span(folder / f"{r}-ray"))
    t0 = time.perf_counter()
    ray.shutdown()
    stopped = time.perf_counter() - t0
    med = {k: statistics.median(v) for k, v in walls.items()}
    table(args, labels, med, walls, (started, stopped))
    print(f"outputs in {folder}", file=sys.stderr)


def table(
    args: argparse.Namespace,
    labels: list[str],
    med: dict[str, float],
    walls: dict[str, list[float]],
    ray_cost: tuple[float, float],
) -> None:
    slowest, parallel, sequential = max(med[x] for x in labels), med["ray"], med["sequential"]

    def cell(key: str) -> str:
        return f"{med[key]:.1f} s ({', '.join(f'{w:.1f}' for w in walls[key])})"

    work = f"{args.configs} configurations, {args.items} prompts × {args.max_tokens} tokens"
    print(f"| {work} | executor wall, median (each round) |")
    print("|---|---|")
    for label in labels:
        print(f"| `{label}` alone, local executor | {cell(label)} |")
    print(f"| all, local sequential executor | {cell('sequential')} |")
    print(f"| all, Ray executor ({args.configs} slots) | {cell('ray')} |")
    added = cell("ray overhead")
    print(f"| Ray wall − its longest configuration's own span (what the executor adds) | {added} |")
    verdict = "met" if parallel <= 1.25 * slowest else "NOT met"
    print(f"| Ray ÷ slowest single (target ≤ 1.25) | {parallel / slowest:.2f} ({verdict}) |")
    print(f"| sequential ÷ Ray | {sequential / parallel:.2f}× |")
    up, down = ray_cost
    print(f"| Ray start-up (local `ray.init`) / shut-down, once | {up:.1f} s / {down:.1f} s |")
    print(f"| load average (1 min) at the end | {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores |")


if __name__ == "__main__":
    main()
