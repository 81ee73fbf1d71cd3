"""Experiments that launch real servers: two llama.cpp servers one after the other, failures that
must stop what was started, and an interrupted experiment that resumes without redoing runs.

Each server is ``python -m llama_cpp.server`` with SmolLM2-135M; runs are kept tiny (2 prompts,
16 tokens) because every test starts real processes.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servediff.cli import main
from servediff.records import read_run
from tests.conftest import LlamaServer

SERVER = (
    '["{python}", "-m", "llama_cpp.server", "--model", "{model_path}", "--model_alias", "%s", '
    '"--host", "{host}", "--port", "{port}", "--n_ctx", "1024", "--seed", "42"%s]'
)


def experiment(
    tmp_path: Path, configs: str, model: str = "smollm2", repeats: int = 1, suite: str = "limit = 2"
) -> Path:
    path = tmp_path / "exp.toml"
    path.write_text(
        f'model = "{model}"\noutput = "{tmp_path / "out"}"\ncontrol_repeats = {repeats}\n'
        f"[sampling]\nmax_tokens = 16\n[suites.prompts]\n{suite}\n" + configs
    )
    return path


def diverging_suite(tmp_path: Path) -> str:
    """Two built-in prompts on which flash attention with n_ubatch 1 changes SmolLM2's answer
    within its first tokens, so a 16-token run has divergences to probe."""
    from servediff.suites.prompts import PROMPTS

    path = tmp_path / "diverging.jsonl"
    ids = ("explain-hash-table", "explain-tcp")
    path.write_text(
        "".join(
            json.dumps({"id": i, "messages": [{"role": "user", "content": PROMPTS[i]}]}) + "\n" for i in ids
        )
    )
    return f'path = "{path}"'


def launch(label: str, alias: str = "smollm2", extra: str = "", more: str = "") -> str:
    argv = SERVER % (alias, extra)
    return f'[[configurations]]\nlabel = "{label}"\nlaunch = {argv}\nstart_timeout = 120\n{more}\n'


STOCK = launch("stock")
FLASH = launch("flash", extra=', "--flash_attn", "true", "--n_ubatch", "1"')


def pids(log: Path) -> list[int]:
    """The pids servediff started, from the banner lines it writes into each server log."""
    return [int(m) for m in re.findall(r"^# servediff .*: started pid (\d+):", log.read_text(), re.M)]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def logs(out: Path, label: str) -> Path:
    (log,) = (out / "logs").glob(f"{label}.*.log")
    return log


def records(out: Path, label: str) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted((out / "runs").glob(f"{label}.*/*.jsonl"))}


def test_two_launched_servers_run_stop_probe_and_report(tmp_path: Path) -> None:
    path = experiment(tmp_path, STOCK + FLASH, suite=diverging_suite(tmp_path))
    out = tmp_path / "out"
    assert main(["experiment", str(path), "--no-progress"]) == 0
    # stock ran first, flash ran and probed its side while up, stock came back for its side
    started = [pid for label in ("stock", "flash") for pid in pids(logs(out, label))]
    assert len(pids(logs(out, "stock"))) == 2 and len(pids(logs(out, "flash"))) == 1
    assert not any(alive(p) for p in started)  # all stopped, nothing left
    assert "llama_model_loader" in logs(out, "stock").read_text()  # the server's own output is kept
    summary = json.loads((out / "summary.json").read_text())
    (control,) = summary["controls"]
    assert (control["a"], control["total"], control["identical"]) == ("stock", 2, 2)
    ((a, b, total, diverged),) = [(p["a"], p["b"], p["total"], p["divergences"]) for p in summary["pairs"]]
    assert (a, b, total) == ("stock", "flash", 2) and diverged
    (version,) = {
        c["version"] for c in summary["claims"] if (c["label"], c["suite"]) == ("flash", "diverging")
    }
    assert version.startswith("llama-cpp-python 0.")  # the server exposes none; the package says
    report = (out / "report.md").read_text()
    assert "Control `stock` (diverging)" in report and "`stock` vs `flash`" in report
    assert "| `flash` | llamacpp |" in report and "`flash_attention` | not verified |" in report
    # Each divergence measured under both servers, replaying the prefix into the KV cache as
    # generation built it; the probes name the diverging tokens, so none is left unexplained.
    sides = {}
    for record in sorted((out / "probes").glob("*.jsonl")):
        lines = [json.loads(x) for x in record.read_text().splitlines()]
        sides[lines[0]["sides"]] = lines[1:]
    assert sorted(sides) == ["a", "b"]
    for lines in sides.values():
        assert len(lines) == len(diverged) and all(x["error"] is None and len(x["top"]) == 5 for x in lines)
        assert all("replayed token by token" in x["method"] and x["tokens"] for x in lines)
    assert f"**{len(diverged)} divergence(s):**" in report and " 0 unexplained" in report
    # everything complete: a re-run starts no server and rewrites no record
    before = {p: p.read_bytes() for p in out.rglob("*.jsonl")}
    assert main(["experiment", str(path), "--no-progress"]) == 0
    assert {p: p.read_bytes() for p in out.rglob("*.jsonl")} == before
    assert len(pids(logs(out, "stock"))) == 2 and len(pids(logs(out, "flash"))) == 1


def test_interrupt_between_configurations_then_resume(tmp_path: Path) -> None:
    path = experiment(tmp_path, STOCK + FLASH)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "servediff", "experiment", str(path), "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C's default back: a shell starts background jobs with SIGINT ignored, Python then
        # installs no KeyboardInterrupt handler, and the test (run as `pytest … &`) would send its
        # SIGINT into nothing
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 240
        while not list((out / "logs").glob("flash.*.log")) or not pids(logs(out, "flash")):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)  # Ctrl-C while the second server starts
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    (flash_pid,) = pids(logs(out, "flash"))
    assert not alive(flash_pid) and not alive(pids(logs(out, "stock"))[0])
    finished = records(out, "stock")
    assert len(finished) == 2 and not records(out, "flash")
    assert main(["experiment", str(path), "--no-progress"]) == 0
    assert records(out, "stock") == finished  # not redone
    # stock starts again only to probe its side of a divergence (flash_attn with n_ubatch 1 can
    # change these two prompts' greedy text)
    (pair,) = json.loads((out / "summary.json").read_text())["pairs"]
    started_again = 1 if pair["divergences"] else 0
    assert len(pids(logs(out, "stock"))) == 1 + started_again and len(pids(logs(out, "flash"))) == 2
    assert len(records(out, "flash")) == 1 and (out / "report.md").is_file()


def failing(tmp_path: Path, code: str, more: str = "") -> Path:
    argv = json.dumps(["{python}", "-c", code, "{port}"])
    return experiment(tmp_path, f'[[configurations]]\nlabel = "bad"\nlaunch = {argv}\n{more}\n')


def test_a_server_that_exits_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = failing(tmp_path, "import sys; print('unknown flag --bogus'); sys.exit(3)")
    assert main(["experiment", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "exited with code 3 before it became healthy" in err and "unknown flag --bogus" in err


def test_a_server_that_never_gets_healthy_is_killed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Ignores SIGTERM (so only SIGKILL stops it) and spawns a worker, which must die with it.
    code = (
        "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
        "print('worker', w.pid, flush=True); time.sleep(300)"
    )
    path = failing(tmp_path, code, "start_timeout = 2\nstop_timeout = 1")
    assert main(["experiment", str(path), "--no-progress"]) == 2
    assert "not healthy after 2 s" in capsys.readouterr().err
    log = logs(tmp_path / "out", "bad")
    (worker,) = re.findall(r"^worker (\d+)", log.read_text(), re.M)
    for pid in [*pids(log), int(worker)]:
        deadline = time.monotonic() + 5  # the orphaned worker is reaped by init, not by us
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(pid)


def test_a_server_that_serves_another_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = experiment(tmp_path, launch("other", alias="some-other-model"), model="smollm2")
    assert main(["experiment", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "serves ['some-other-model'], not the experiment's model 'smollm2'" in err
    (pid,) = pids(logs(tmp_path / "out", "other"))
    assert not alive(pid)


def test_claimed_speculative_decoding_that_did_not_engage_is_flagged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A fake vLLM (the fault-injection stub run as a process) exporting vLLM's counters: one
    # server's drafts move with every request, the other's stay put although it claims them.
    stub = Path(__file__).parent / "helpers" / "stub_server.py"
    configs = "".join(
        f'[[configurations]]\nlabel = "{label}"\nprofile = "vllm"\nclaims = ["speculative_decoding"]\n'
        f"launch = {json.dumps(['{python}', str(stub), '{port}', mode])}\n"
        for label, mode in (("spec-ok", "engaged"), ("spec-silent", "silent"))
    )
    path = experiment(tmp_path, configs, model="stub")
    assert main(["experiment", str(path), "--no-progress"]) == 1  # the claim check failed
    assert "spec-silent claims speculative decoding — NOT ENGAGED" in capsys.readouterr().err
    report = (tmp_path / "out" / "report.md").read_text()
    assert "> **Flag:** `spec-silent` claims speculative decoding — **NOT ENGAGED**" in report
    assert "`spec-ok`" not in report.split("## Is each")[1].split("| configuration")[0]  # not flagged
    from servediff.records import read_run

    runs = {p.parent.name.split(".")[0]: read_run(p) for p in (tmp_path / "out" / "runs").glob("*/*r1.jsonl")}
    ok = runs["spec-ok"].header.extra["verification"]
    spec = ok["claims"]["speculative_decoding"]
    # 2 requests x (4 drafts of 2 tokens, 5 accepted): length 1 + 10/8, rate 10/16
    assert (spec["status"], spec["drafts"], spec["accepted_tokens"]) == ("verified", 8, 10)
    assert spec["acceptance_length"] == pytest.approx(2.25)
    assert spec["acceptance_rate"] == pytest.approx(0.625)
    assert spec["per_position_rate"] == pytest.approx([0.75, 0.5])
    assert ok["server_version"] == "0.0.0-fake" and runs["spec-ok"].header.engine["server_version"]
    silent = runs["spec-silent"].header.extra["verification"]
    assert silent["flagged"] == ["speculative_decoding"]


def test_load_sweep_counts_distinct_completions_per_prompt(tmp_path: Path) -> None:
    sweep = "[sweep]\nconcurrency = [1, 3]\nrepeats = 2\n"
    path = experiment(tmp_path, STOCK + sweep, repeats=0)  # the sweep is the only repeat
    out = tmp_path / "out"
    assert main(["experiment", str(path), "--no-progress"]) == 0
    from servediff.records import read_run

    runs = [read_run(p) for p in sorted((out / "sweep").glob("stock.*/*.jsonl"))]
    assert sorted((r.header.concurrency, r.header.repeat) for r in runs) == [(1, 1), (1, 2), (3, 1), (3, 2)]
    summary = json.loads((out / "summary.json").read_text())
    (sweep,) = summary["sweeps"]
    levels = [x["concurrency"] for x in sweep["levels"]]
    for level in (1, 3):
        at = levels.index(level)
        distinct = {item: per[at] for item, per, _ in sweep["items"]}
        texts: dict[str, set[str]] = {}
        for r in runs:
            if r.header.concurrency == level:
                for item_id, item in r.items.items():
                    texts.setdefault(item_id, set()).add(item.text)
        assert distinct == {k: len(v) for k, v in texts.items()} and len(distinct) == 2
    report = (out / "report.md").read_text()
    assert "## Load-induced nondeterminism" in report and "| prompt | c=1 | c=3 | all levels |" in report
    assert not any("@c" in p["a"] + p["b"] for p in summary["pairs"])  # sweep runs are not paired


def test_an_already_running_server(tmp_path: Path, llama_server: LlamaServer) -> None:
    # base_url: servediff neither starts nor stops it, but still checks the model it serves.
    config = f'[[configurations]]\nlabel = "running"\nbase_url = "{llama_server.base_url}"\n'
    path = experiment(tmp_path, config, model=llama_server.model)
    assert main(["experiment", str(path), "--no-progress"]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [(c["a"], c["total"]) for c in summary["controls"]] == [("running", 2)]
    assert {c["start"] for c in summary["claims"] if c["label"] == "running"} == {"server"}
    assert llama_server.proc.poll() is None  # left running
    wrong = experiment(tmp_path, config, model="another-model")
    assert main(["experiment", str(wrong), "--no-progress"]) == 2


def test_speed_repeats_alternate_launched_servers_abba(tmp_path: Path) -> None:
    """``speed_repeats = 2`` with two launched servers: stock, flash, flash, stock, each run on a
    fresh start of its server, each with its machine load recorded; the verdict's speedup is then
    over 2 and 2 runs (a t interval that includes run-to-run variance), not over items."""
    path = experiment(tmp_path, STOCK + launch("flash", extra=', "--flash_attn", "true"'), repeats=0)
    path.write_text("speed_repeats = 2\n" + path.read_text() + "[probes]\nenabled = false\n")
    out = tmp_path / "out"
    assert main(["experiment", str(path), "--no-progress"]) == 0
    started = {label: pids(logs(out, label)) for label in ("stock", "flash")}
    assert len(started["stock"]) == 2 and len(started["flash"]) == 2  # one start per run
    assert not any(alive(p) for p in started["stock"] + started["flash"])
    runs = [read_run(p) for p in (out / "runs").glob("*/*.jsonl")]
    first = sorted(
        runs, key=lambda r: min((i.finished_at or 0) - (i.latency_s or 0) for i in r.items.values())
    )
    assert [(r.header.label, r.header.repeat) for r in first] == [
        ("stock", 1), ("flash", 1), ("flash", 2), ("stock", 2)
    ]  # fmt: skip
    assert all(r.header.extra.get("load") for r in first)  # the load check still has its data
    summary = json.loads((out / "summary.json").read_text())
    (verdict,) = [v for v in summary["verdicts"] if v["label"] == "flash"]
    assert verdict["speedup"]["basis"] == "runs" and verdict["speedup"]["runs"] == [2, 2]
    report = (out / "report.md").read_text()
    if verdict["load"]["verdict"] in ("changed", "oversubscribed"):  # a busy machine: a note, no interval
        assert "NOT COMPARABLE" in report
    else:
        assert "over 2 and 2 runs" in report
