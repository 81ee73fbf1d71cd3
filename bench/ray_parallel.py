"""N configurations on N slots of a Ray cluster against the sequential executor.

    .venv/bin/python bench/ray_parallel.py --configs 2 --items 6 --max-tokens 48

N llama.cpp server configurations (SmolLM2-135M-Instruct, one thread each, differing in
``--n_batch`` so that each is its own configuration) run the same prompts. Measured, in this
order, each from a fresh output folder: every configuration alone on the local executor (the
slowest of these is the floor a parallel run can reach), all of them on the local executor one
after the other, then all of them on a local Ray cluster of N CPU slots (each configuration
declares ``num_cpus = 1``). Ray's own start-up (``ray.init`` of a local cluster) and shut-down
are timed apart from the experiment. Target: Ray's wall time ≤ 1.25 × the slowest single
configuration. Probes are off: this measures how runs are scheduled, not what they find.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

from servediff.experiment import load_experiment, run_experiment
from servediff.experiment.cluster import ray_executor
from servediff.experiment.cluster_spec import Executor

SERVER = (
    '["{python}", "-m", "llama_cpp.server", "--model", "{model_path}", "--model_alias", "{model}", '
    '"--host", "{host}", "--port", "{port}", "--n_ctx", "1024", "--seed", "42", "--n_threads", "1", '
    '"--n_batch", "%d"]'
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


def timed_run(path: Path, out: Path, only: str | None = None, on_ray: bool = False) -> float:
    exp = load_experiment(path, output=out)
    if only is not None:
        exp = dataclasses.replace(exp, configurations=(exp.config(only),), control=only)
    executor = {"executor": ray_executor(Executor(kind="ray"))} if on_ray else {}
    t0 = time.perf_counter()
    outcome = run_experiment(exp, progress=False, **executor)
    wall = time.perf_counter() - t0
    if outcome.errors or outcome.lost:
        raise SystemExit(f"{out}: {outcome.errors} error(s), lost {outcome.lost}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", type=int, default=2)
    ap.add_argument("--items", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=48)
    args = ap.parse_args()
    import ray

    folder = Path(tempfile.mkdtemp(prefix="servediff-bench-ray-"))
    path = experiment_file(folder, args.configs, args.items, args.max_tokens)
    labels = [c.label for c in load_experiment(path).configurations]
    single = {label: timed_run(path, folder / f"alone-{label}", only=label) for label in labels}
    sequential = timed_run(path, folder / "sequential")
    t0 = time.perf_counter()
    ray.init(num_cpus=args.configs, include_dashboard=False, log_to_driver=False)
    started = time.perf_counter() - t0
    parallel = timed_run(path, folder / "ray", on_ray=True)
    t0 = time.perf_counter()
    ray.shutdown()
    stopped = time.perf_counter() - t0
    slowest = max(single.values())
    load = os.getloadavg()[0]
    print(f"| configurations | {args.configs} ({args.items} prompts × {args.max_tokens} tokens each) |")
    print("|---|---|")
    for label, wall in single.items():
        print(f"| `{label}` alone (local executor) | {wall:.1f} s |")
    print(f"| all, local sequential executor | {sequential:.1f} s |")
    ratio = parallel / slowest
    print(f"| all, Ray executor ({args.configs} slots) | {parallel:.1f} s = {ratio:.2f} × slowest |")
    print(f"| target ≤ 1.25 × slowest single | {'met' if parallel <= 1.25 * slowest else 'NOT met'} |")
    print(f"| Ray start-up (local `ray.init`) / shut-down | {started:.1f} s / {stopped:.1f} s |")
    print(f"| speed-up over sequential (without / with start-up) | "
          f"{sequential / parallel:.2f}× / {sequential / (parallel + started):.2f}× |")
    print(f"| load average (1 min) at the end | {load:.1f} on {os.cpu_count()} cores |")
    print(f"outputs in {folder}", file=sys.stderr)


if __name__ == "__main__":
    main()
