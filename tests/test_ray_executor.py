"""Experiments on a local Ray cluster: configurations in parallel, a worker killed mid-run, replicas.

The cluster is started once for the module, on this machine, with fake GPUs (Ray hands them
out; llama.cpp runs on the CPU with one thread). Every configuration is a real
``python -m llama_cpp.server`` with SmolLM2-135M; runs are tiny (few prompts, 16 tokens).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servediff.cli import main
from servediff.experiment import load_experiment, run_experiment
from servediff.experiment.cluster import ray_executor
from servediff.experiment.cluster_spec import Executor
from servediff.records import read_header, read_run
from tests.conftest import LlamaServer
from tests.test_experiment_launch import alive, diverging_suite, pids

ray = pytest.importorskip("ray")

SERVER = (
    '["{python}", "-m", "llama_cpp.server", "--model", "{model_path}", "--model_alias", "smollm2", '
    '"--host", "{host}", "--port", "{port}", "--n_ctx", "1024", "--seed", "42", '
    '"--n_threads", "1", "--n_threads_batch", "1"%s]'
)
GPU = "resources = { num_gpus = 1, num_cpus = 0.5 }"


@pytest.fixture(scope="module", autouse=True)
def cluster() -> Iterator[None]:
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def configuration(label: str, extra: str = "", more: str = GPU) -> str:
    argv = SERVER % extra
    return f'[[configurations]]\nlabel = "{label}"\nlaunch = {argv}\nstart_timeout = 120\n{more}\n'


def experiment(tmp_path: Path, body: str, suite: str = "limit = 2", head: str = "") -> Path:
    path = tmp_path / "exp.toml"
    path.write_text(
        f'model = "smollm2"\ncontrol_repeats = 0\n{head}\n'
        f"[sampling]\nmax_tokens = 16\n[suites.prompts]\n{suite}\n" + body
    )
    return path


def on_ray(path: Path, out: Path) -> Any:
    exp = load_experiment(path, output=out)
    return run_experiment(exp, progress=False, executor=ray_executor(Executor(kind="ray")))


def outputs(out: Path) -> dict[tuple[str, str], tuple[str, list[int] | None]]:
    found = {}
    for path in sorted((out / "runs").glob("*/*.jsonl")):
        run = read_run(path)
        for item in run.items.values():
            found[(run.label, item.id)] = (item.text, item.token_ids)
    return found


def busy(out: Path, label: str) -> tuple[float, float]:
    """From the first request sent to the last answer received (epoch seconds)."""
    (path,) = (out / "runs").glob(f"{label}.*/*.jsonl")
    lines = [json.loads(x) for x in path.read_text().splitlines()[1:]]
    return min(x["finished_at"] - x["latency_s"] for x in lines), max(x["finished_at"] for x in lines)


def test_two_configurations_in_parallel_match_the_sequential_executor(tmp_path: Path) -> None:
    body = configuration("stock") + configuration("ubatch1", ', "--n_ubatch", "1"')
    path = experiment(tmp_path, body, suite=diverging_suite(tmp_path))
    local = run_experiment(load_experiment(path, output=tmp_path / "local"), progress=False)
    t0 = time.monotonic()
    remote = on_ray(path, tmp_path / "ray")
    print(f"two configurations on Ray: {time.monotonic() - t0:.1f} s")
    assert remote.errors == 0 and not remote.lost and len(remote.ran) == len(local.ran) == 2
    assert outputs(tmp_path / "ray") == outputs(tmp_path / "local")  # same texts and token ids
    assert len(outputs(tmp_path / "ray")) == 4
    # in parallel: each configuration sent a request before the other had its last answer
    a, b = busy(tmp_path / "ray", "stock"), busy(tmp_path / "ray", "ubatch1")
    assert a[0] < b[1] and b[0] < a[1], (a, b)
    # where each ran: one node, one (fake) GPU each, different GPUs
    placements = [
        read_header(p).extra["placement"] for p in sorted((tmp_path / "ray" / "runs").glob("*/*.jsonl"))
    ]
    assert all(p["executor"] == "ray" and p["node_id"] for p in placements)
    assert sorted(g for p in placements for g in p["gpus"]) == ["0", "1"]
    # the probe round ran both sides of the pair, as locally
    assert len(remote.probed) == len(local.probed) == 2
    report = (tmp_path / "ray" / "report.md").read_text()
    assert "## Where each configuration ran" in report and "| `ubatch1` |" in report
    assert 'id="placement"' in (tmp_path / "ray" / "report.html").read_text()
    # everything is complete: a re-run starts nothing and rewrites nothing
    before = {p: p.read_bytes() for p in (tmp_path / "ray").rglob("*.jsonl")}
    again = on_ray(path, tmp_path / "ray")
    assert not again.ran and {p: p.read_bytes() for p in (tmp_path / "ray").rglob("*.jsonl")} == before


def test_a_worker_killed_mid_run_is_resumed_by_a_rerun(tmp_path: Path) -> None:
    path = experiment(tmp_path, configuration("stock"), suite="limit = 8", head="[probes]\nenabled = false")
    out = tmp_path / "out"
    killed: list[int] = []

    def kill_worker_after_the_first_item() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            records = list((out / "runs").glob("stock.*/*.jsonl"))
            logs = list((out / "logs").glob("stock.*.log"))
            if records and logs and len(records[0].read_bytes().splitlines()) >= 2 and pids(logs[0]):
                server = pids(logs[0])[0]
                worker = int(Path(f"/proc/{server}/stat").read_text().rsplit(")", 1)[1].split()[1])
                killed.extend([worker, server])
                os.kill(worker, signal.SIGKILL)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_worker_after_the_first_item)
    killer.start()
    first = on_ray(path, out)
    killer.join()
    assert killed, "the run finished before the worker could be killed"
    worker, server = killed
    assert first.lost == ["stock"] and first.errors >= 1
    # The engine dies with its worker. Both are waited for: a SIGKILLed worker that holds a
    # loaded engine can take seconds to finish exiting on a busy machine (seen in CI: the server
    # gone, the worker not yet).
    deadline = time.monotonic() + 30
    while (alive(worker) or alive(server)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(worker) and not alive(server)
    (record,) = (out / "runs").glob("stock.*/*.jsonl")
    partial = read_run(record)
    assert 1 <= len(partial.done_ids()) < 8 and partial.torn is None  # complete lines only
    second = on_ray(path, out)
    assert second.errors == 0 and not second.lost
    done = read_run(record)
    assert len(done.done_ids()) == 8
    ids = [json.loads(x)["id"] for x in record.read_text().splitlines()[1:]]
    assert len(ids) == len(set(ids)) == 8  # nothing lost, nothing doubled
    assert {i: done.items[i].text for i in partial.done_ids()} == {
        i: partial.items[i].text for i in partial.done_ids()
    }


def replica_check(out: Path, label: str) -> dict[str, Any]:
    (path,) = (out / "runs").glob(f"{label}.*/*.jsonl")
    check: dict[str, Any] = read_header(path).extra["replica_check"]
    return check


def served_by(out: Path, label: str) -> list[int]:
    (path,) = (out / "runs").glob(f"{label}.*/*.jsonl")
    return sorted(i.metadata["engine"]["replica"] for i in read_run(path).items.values())


def test_two_identical_launched_replicas_agree(tmp_path: Path) -> None:
    # chosen in the file, through the CLI, with the workers writing into the output folder
    body = configuration("stock", more=f"replicas = 2\nreplica_check = 2\n{GPU}")
    head = '[probes]\nenabled = false\n[executor]\nkind = "ray"\nrecords = "shared"'
    path = experiment(tmp_path, body, suite="limit = 4", head=head)
    assert main(["experiment", str(path), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    assert served_by(tmp_path / "out", "stock") == [0, 0, 1, 1]  # spread over both
    check = replica_check(tmp_path / "out", "stock")
    assert (check["replicas"], check["items"], check["heterogeneous"]) == (2, 2, False)
    assert len(check["records"]) == 2 and not check["disagree"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "replicas agree" in report


def test_replicas_with_different_knobs_are_flagged(tmp_path: Path) -> None:
    stock = LlamaServer(["--n_threads", "1", "--model_alias", "smollm2"], tmp_path / "a.log")
    try:
        ubatch = LlamaServer(
            ["--n_threads", "1", "--model_alias", "smollm2", "--n_ubatch", "1"], tmp_path / "b.log"
        )
        try:
            body = (
                f'[[configurations]]\nlabel = "pool"\nbase_url = ["{stock.base_url}", "{ubatch.base_url}"]\n'
                "replica_check = 2\n"
            )
            path = experiment(tmp_path, body, suite=diverging_suite(tmp_path))
            outcome = on_ray(path, tmp_path / "out")
            # the CLI's flag; everything is done, so nothing starts: exit 1 for the flag alone
            code = main(["experiment", str(path), "--out", str(tmp_path / "out"), "--executor", "ray"])
        finally:
            ubatch.stop()
    finally:
        stock.stop()
    assert outcome.errors == 0 and code == 1
    check = replica_check(tmp_path / "out", "pool")
    assert check["heterogeneous"] and check["disagree"] == [0, 1] and check["differing_items"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "replicas disagree" in report and "#0, #1 differ" in report
    assert "replicas disagree" in (tmp_path / "out" / "report.html").read_text()
    assert any("replicas" in f for f in outcome.flags)
