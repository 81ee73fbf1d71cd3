"""A SIGKILLed experiment leaves no server running: the kernel ends a launched server with the
experiment (Linux), and the next run ends whatever an earlier one left listed in its output folder.

Each server is a real ``python -m llama_cpp.server`` with SmolLM2-135M on one thread.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servediff.engines.knobs import default_model_path
from servediff.experiment import ledger
from tests.conftest import free_port
from tests.helpers.kills import env

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

KILLS = 3
SERVER = json.dumps(["{python}", "-m", "llama_cpp.server", "--model", "{model_path}", "--model_alias",
                     "smollm2", "--host", "{host}", "--port", "{port}", "--n_ctx", "1024", "--seed", "42",
                     "--n_threads", "1", "--n_threads_batch", "1"])  # fmt: skip


def experiment(tmp_path: Path) -> Path:
    path = tmp_path / "exp.toml"
    path.write_text(
        f'model = "smollm2"\noutput = "{tmp_path / "out"}"\ncontrol_repeats = 1\n'
        "[sampling]\nmax_tokens = 8\n[suites.prompts]\nlimit = 2\n"
        f'[[configurations]]\nlabel = "stock"\nlaunch = {SERVER}\nstart_timeout = 120\n'
    )
    return path


def started(out: Path) -> list[int]:
    """Every pid servediff started, from the banner lines of the server logs."""
    text = "".join(p.read_text() for p in (out / "logs").glob("*.log")) if (out / "logs").is_dir() else ""
    return [int(m) for m in re.findall(r"^# servediff .*: started pid (\d+):", text, re.M)]


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def orphans(out: Path, wait_s: float = 5.0) -> list[int]:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(alive(p) for p in started(out)):
        time.sleep(0.1)
    return [p for p in started(out) if alive(p)]


def cli(path: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "servediff", "experiment", str(path), "--no-progress"]
    return subprocess.Popen(argv, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_killed_experiment_leaves_no_server_running(tmp_path: Path) -> None:
    path, out = experiment(tmp_path), tmp_path / "out"
    rng, kills, orphaned = random.Random(7), 0, []
    try:
        for _ in range(4 * KILLS):  # bounded: a quiet machine can finish a run before the kill
            if kills == KILLS:
                break
            before = len(started(out))
            proc = cli(path)
            deadline = time.monotonic() + 120
            while len(started(out)) == before and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 4.0))  # starting, loading, healthy or mid-run
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                kills += 1
            elif (out / "runs").is_dir():
                shutil.rmtree(out / "runs")  # it finished first: give the next start work again
            proc.communicate(timeout=60)
            orphaned += orphans(out)
        assert kills == KILLS, f"only {kills} of {KILLS} starts were still running when killed"
        again = cli(path)
        _, err = again.communicate(timeout=300)
        assert again.returncode == 0, err.decode()[-3000:]
        print(f"kills: {kills}  servers started: {len(started(out))}  orphaned after a kill: {len(orphaned)}")
        assert orphaned == [], f"servers outlived the killed experiment: {orphaned}"
        assert orphans(out) == [] and not list((out / "servers").glob("*.json"))
    finally:
        for pid in started(out):  # never leave one behind, even when the test fails
            if alive(pid):
                subprocess.run(["kill", "-9", str(pid)], check=False)


def test_the_next_run_ends_what_an_earlier_run_left_listed(tmp_path: Path) -> None:
    path, out = experiment(tmp_path), tmp_path / "out"
    port = free_port()
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(default_model_path()), "--host",
            "127.0.0.1", "--port", str(port), "--n_threads", "1", "--n_threads_batch", "1"]  # fmt: skip
    # A survivor, as a killed run without the kernel's help would leave it: listed, still up.
    survivor = subprocess.Popen(
        argv, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    # A stale entry whose pid now names another process (another start time): left alone.
    stranger = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        ledger.enter(out / "servers", survivor.pid, port, "stock")
        stale = ledger.enter(out / "servers", stranger.pid, free_port(), "old")
        entry = json.loads(stale.read_text())
        stale.write_text(json.dumps({**entry, "started": entry["started"] - 1}))
        run = cli(path)
        _, err = run.communicate(timeout=300)
        assert run.returncode == 0, err.decode()[-3000:]
        assert survivor.wait(timeout=30) is not None  # ended (and reaped here, its parent)
        assert re.search(rb"warning: stopped 1 process\(es\) of server 'stock' \(pid \d+, port \d+\)", err)
        assert stranger.poll() is None, "a process that merely reuses a listed pid was signalled"
        assert not list((out / "servers").glob("*.json"))
    finally:
        for proc in (survivor, stranger):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
