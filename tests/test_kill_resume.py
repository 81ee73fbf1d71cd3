"""SIGKILL ``servediff run`` (and, separately, its engine) mid-run; resuming loses and doubles nothing.

The CLI runs as a subprocess against a real llama.cpp server; tests/helpers/kills.py does the
killing (``python -m tests.helpers.kills --kills 25`` runs a larger campaign).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

from servediff.records import read_run
from tests.conftest import LlamaServer
from tests.helpers.kills import Job, Tally, audit, campaign, env, lines_in, unicode_suite

# Grade-school questions in the GSM8K file format, so that finished items are scored.
QUESTIONS = [
    ("Tom has 3 apples and buys 4 more. How many apples does he have?", 7),
    ("A box holds 6 eggs. How many eggs are in 5 boxes?", 30),
    ("Sara had 20 stickers and gave away 8. How many are left?", 12),
    ("A train travels 60 km each hour for 3 hours. How far does it go?", 180),
    ("There are 9 birds and 4 fly away. How many birds remain?", 5),
    ("Each pencil costs 2 dollars. How much do 7 pencils cost?", 14),
]


def test_sigkill_at_random_points_loses_and_doubles_nothing(
    llama_server: LlamaServer, tmp_path: Path
) -> None:
    suite = unicode_suite(tmp_path)
    reference = Job(llama_server.base_url, tmp_path / "reference.jsonl", limit=5, data=suite)
    subprocess.run(reference.argv(), env=env(), check=True, capture_output=True, timeout=120)
    expected = sorted(read_run(reference.out).done_ids())
    assert len(expected) == 5

    # Four kills: one left as it is, then the last line cut at its newline, inside a
    # character, anywhere (TAILS).
    tally = campaign(llama_server.base_url, tmp_path, kills=4, seed=3, expected=expected, limit=5, data=suite)
    print(f"kills {tally.kills} (cut tails {tally.cuts}), lost {tally.lost}, doubled {tally.doubled}")
    assert tally.kills >= 4 and tally.cuts >= 2
    assert (tally.lost, tally.doubled, tally.extra) == (0, 0, 0)


def test_engine_killed_mid_run_records_errors_and_a_rerun_completes(tmp_path: Path) -> None:
    data = tmp_path / "gsm8k.jsonl"
    data.write_text(
        "".join(json.dumps({"question": q, "answer": f"So.\n#### {a}"}) + "\n" for q, a in QUESTIONS)
    )
    server = LlamaServer(["--n_threads", "1"], tmp_path / "server1.log")
    try:
        job = Job(server.base_url, tmp_path / "run.jsonl", limit=6, suite="gsm8k", data=data)
        proc = subprocess.Popen(job.argv(), env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while lines_in(job.out) < 2 and time.monotonic() < deadline:  # header + one finished item
            time.sleep(0.005)
        server.proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        server.stop()
    assert proc.returncode == 2, err.decode()
    assert b"recorded as errors" in err
    first = read_run(job.out)
    failed = [i for i in first.items.values() if i.error]
    assert failed and len(first.items) == 6
    # An engine failure is an error, never a wrong answer.
    assert all(i.correct is None and i.answer is None for i in failed)
    assert all(i.correct is not None for i in first.items.values() if not i.error)

    server = LlamaServer(["--n_threads", "1"], tmp_path / "server2.log")  # a new port, same run
    try:
        again = Job(server.base_url, job.out, limit=6, suite="gsm8k", data=data)
        done = subprocess.run(again.argv(), env=env(), capture_output=True, timeout=120)
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr.decode()
    assert f"{len(failed)} done, {6 - len(failed)} already finished".encode() in done.stdout
    tally = Tally()
    audit(job.out, sorted(first.items), tally)
    assert (tally.lost, tally.doubled, tally.extra) == (0, 0, 0)
    assert all(i.correct is not None for i in read_run(job.out).items.values())
