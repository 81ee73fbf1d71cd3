"""Speed measured on a busy machine is not reported as if it were quiet: every run records the
machine's load, configurations that can be up at once run in ABBA blocks, and a speedup measured
under different loads gets no interval, in the Speed table and the verdict line alike.

Runs are real: the embedded engine with SmolLM2-135M; the load is real too, busy loops on every
usable core while one configuration runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servediff.cli import main
from servediff.compare.machine_load import LOAD_CHANGE, run_load
from servediff.experiment.plan import alternated, interleaved
from servediff.machine import usable_cores
from servediff.records import read_run


def test_the_plan_interleaves_configurations_abba() -> None:
    ids = [f"i{k}" for k in range(1, 8)]
    order = [(label, "".join(i[1:] for i in items)) for label, items in interleaved(["A", "B"], ids, 2)]
    assert order == [("A", "12"), ("B", "12"), ("B", "34"), ("A", "34"), ("A", "56"), ("B", "56"),
                     ("B", "7"), ("A", "7")]  # fmt: skip
    three = [label for label, _ in interleaved(["A", "B", "C"], ids, 4)]
    assert three == ["A", "B", "C", "C", "B", "A"]


def test_the_plan_alternates_repeats_of_servers_abba() -> None:
    order = alternated(["A", "B"], 4)
    assert order == [("A", 1), ("B", 1), ("B", 2), ("A", 2), ("A", 3), ("B", 3), ("B", 4), ("A", 4)]
    assert [label for label, _ in alternated(["A", "B", "C"], 2)] == ["A", "B", "C", "C", "B", "A"]


def test_an_experiment_of_in_process_engines_runs_them_in_abba_blocks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = tmp_path / "exp.toml"
    exp.write_text(
        f'model = "smollm2"\noutput = "{tmp_path / "out"}"\ncontrol_repeats = 0\n'
        "[sampling]\nmax_tokens = 2\n[suites.prompts]\nlimit = 8\n"
        '[[configurations]]\nlabel = "stock"\nconfig = "stock"\n'
        '[[configurations]]\nlabel = "tuned"\nconfig = "stock"\nknobs = { n_batch = 256 }\n'
    )
    assert main(["experiment", str(exp), "--no-progress"]) == 0
    runs = {r.label: r for r in (read_run(p) for p in (tmp_path / "out" / "runs").glob("*/*.jsonl"))}
    sent = sorted(
        ((it.finished_at or 0.0) - it.latency_s, label, it.id)
        for label, r in runs.items()
        for it in r.items.values()
    )
    labels = [label for _, label, _ in sent]
    # blocks of 4 items: stock, tuned, tuned, stock
    assert labels == ["stock"] * 4 + ["tuned"] * 8 + ["stock"] * 4
    assert all(len(r.header.extra["load"]) == 2 for r in runs.values())  # one stretch per block
    said = capsys.readouterr()
    for label in ("stock", "tuned"):  # a run's counts over its blocks
        assert f"[{label}] prompts #1: 8 done, 0 already finished, 0 failed" in said.out + said.err


def test_speed_repeats_of_in_process_engines_are_interleaved_too(tmp_path: Path) -> None:
    """``speed_repeats = 2``: each repeat in ABBA blocks, the second starting with the other
    configuration (stock, tuned | tuned, stock), so the verdict's speedup is over 2 and 2 runs."""
    exp = tmp_path / "exp.toml"
    exp.write_text(
        f'model = "smollm2"\noutput = "{tmp_path / "out"}"\ncontrol_repeats = 0\nspeed_repeats = 2\n'
        "[sampling]\nmax_tokens = 2\n[suites.prompts]\nlimit = 4\n[probes]\nenabled = false\n"
        '[[configurations]]\nlabel = "stock"\nconfig = "stock"\n'
        '[[configurations]]\nlabel = "tuned"\nconfig = "stock"\nknobs = { n_batch = 256 }\n'
    )
    assert main(["experiment", str(exp), "--no-progress"]) == 0
    runs = [read_run(p) for p in (tmp_path / "out" / "runs").glob("*/*.jsonl")]
    sent = sorted(
        ((it.finished_at or 0.0) - it.latency_s, r.header.label, r.header.repeat)
        for r in runs
        for it in r.items.values()
    )
    order = [f"{label}{repeat}" for _, label, repeat in sent]
    assert order == ["stock1"] * 4 + ["tuned1"] * 4 + ["tuned2"] * 4 + ["stock2"] * 4
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    (verdict,) = [v for v in summary["verdicts"] if v["label"] == "tuned"]
    assert verdict["speedup"]["basis"] == "runs" and verdict["speedup"]["runs"] == [2, 2]


def _run(tmp_path: Path, label: str) -> Path:
    out = tmp_path / f"{label}.jsonl"
    args = ["run", "--engine", "llamacpp", "--suite", "prompts", "--limit", "6", "--max-tokens", "16",
            "--label", label, "--out", str(out), "--no-progress"]  # fmt: skip
    assert main(args) == 0
    return out


def _per_core() -> float:
    return os.getloadavg()[0] / usable_cores()


def test_a_speedup_measured_under_a_changed_load_gets_no_interval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    quiet = _run(tmp_path, "stock")
    before = run_load([read_run(quiet)])
    assert before is not None
    spin = "import os\nos.nice(19)\nwhile True:\n    pass\n"
    # Three loops a core: the added load must show above whatever earlier work left in the
    # 1-minute average (one a core can stay below `before + LOAD_CHANGE` when that is high).
    loops = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(3 * usable_cores())]
    try:
        # The 1-minute average follows slowly: wait until it shows the added load.
        deadline = time.monotonic() + 150
        while _per_core() <= before + LOAD_CHANGE + 0.1 and time.monotonic() < deadline:
            time.sleep(1)
        busy = _run(tmp_path, "tuned")
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    md = tmp_path / "report.md"
    capsys.readouterr()
    assert main(["compare", str(quiet), str(busy), "--md", str(md), "--json"]) in (0, 1)
    summary = json.loads(capsys.readouterr().out)
    (verdict,) = [v for v in summary["verdicts"] if v["label"] == "tuned"]
    load = verdict["load"]
    print(f"load per core: stock {load['a']:.2f}, tuned {load['b']:.2f} → {load['verdict']}")
    assert load["verdict"] in ("changed", "oversubscribed") and load["b"] > load["a"]
    text = md.read_text()
    (line,) = [x for x in text.splitlines() if x.startswith("| `tuned` | `stock` |")]
    speed = line.split(" | ")[2]  # the verdict table's speed cell: the ratio and the note, no interval
    assert "NOT COMPARABLE" in speed and "[" not in speed.split("NOT COMPARABLE")[0]
    (row,) = [x for x in text.splitlines() if x.startswith("| prompts | `tuned`")]
    assert "NOT COMPARABLE" in row
