"""The GPU teacher-forced study script, end to end on the CPU with tiny limits (fp32 against bf16),
so that a run on the GPU machine does not fail on something a CPU could have caught."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("transformers", reason="the hf extra is not installed: pip install 'servediff[hf]'")
pytest.importorskip("gguf", reason="the hf extra is not installed: pip install 'servediff[hf]'")

import torch

from servediff.compare.kl_runs import positions
from servediff.engines.knobs import default_model_path
from servediff.records import read_run
from tests.helpers.scripts import load_script

torch.set_num_threads(1)  # the test machine's cores are shared

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_kl_study.py"


def _script() -> ModuleType:
    return load_script(SCRIPT)


def test_the_study_runs_end_to_end_on_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    study = _script()
    out = tmp_path / "study"
    argv = ["--device", "cpu", "--dtypes", "fp32", "bf16", "--limit", "2", "--max-tokens", "8"]
    argv += ["--gsm8k-limit", "2", "--top-k", "5", "--out", str(out)]
    monkeypatch.delenv(study.MODEL_ENV, raising=False)
    assert study.main(argv) == 2  # no model named: one clear line, no traceback
    monkeypatch.setenv(study.MODEL_ENV, str(default_model_path()))
    assert study.main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    rows = {(r["corpus"], r["b"]): r for r in summary["kl"]}
    assert rows.keys() == {(c, b) for c in ("on-policy", "gsm8k") for b in ("fp32-again", "bf16")}
    for corpus in ("on-policy", "gsm8k"):
        aa, bf16 = rows[(corpus, "fp32-again")], rows[(corpus, "bf16")]
        assert aa["kl_mean"] == 0.0 and aa["kl_max"] == 0.0 and aa["same_top1"] == 1.0
        assert bf16["kl_mean"] > 0.0 and bf16["positions"] == aa["positions"]
    assert rows[("on-policy", "bf16")]["sequences"] == 2 and rows[("gsm8k", "bf16")]["sequences"] == 2
    # The argmax-against-greedy table, against a direct count from the two records.
    runs = out / "runs"
    for row, own in zip(
        summary["greedy"], (runs / "score-on-policy" / "fp32.jsonl", runs / "score-own" / "bf16.jsonl")
    ):
        gen, scored = read_run(runs / "generate" / f"{row['dtype']}.jsonl"), read_run(own)
        direct = sum(
            next(iter(top)) != token
            for item_id, item in scored.items.items()
            for top, token in zip(positions(item)[0], gen.items[item_id].token_ids or [])
        )
        assert row["positions"] == 16 and row["disagreements"] == direct
    text = (out / "study.md").read_text()
    assert "| gsm8k | bf16 | 2 |" in text and "Teacher-forced argmax against greedy decoding" in text
    assert "Teacher-forced divergence (KL)" in (out / "report.md").read_text()
