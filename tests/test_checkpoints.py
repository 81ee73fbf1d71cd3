"""Checkpoints as a declared dimension: a requantised GGUF of the same model is compared when the
comparison declares it and the tokenizers match, and refused otherwise."""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import llama_cpp
import pytest

from servediff.cli import main
from servediff.compare.study import problems
from servediff.engines.knobs import default_model_path
from servediff.experiment import run_experiment
from servediff.experiment.spec import ExperimentError, load_experiment
from servediff.records import read_run

GSM8K = Path(__file__).parent / "data" / "gsm8k" / "test.jsonl"


def requantise(out: Path, ftype: int) -> Path:
    """Another GGUF type from the shipped Q4_1 file, with llama.cpp's own quantiser."""
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    params.nthread = 1
    rc = llama_cpp.llama_model_quantize(
        str(default_model_path()).encode(), str(out).encode(), ctypes.byref(params)
    )
    assert rc == 0 and out.is_file()
    return out


@pytest.fixture(scope="module")
def q8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("q8")
    return requantise(folder / "SmolLM2-135M-Instruct.Q8_0.gguf", llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, q8: Path) -> list[Path]:
    folder = tmp_path_factory.mktemp("ckpt")
    paths = []
    for label, model in (("q4_1", default_model_path()), ("q8_0", q8)):
        out = folder / f"{label}.jsonl"
        argv = ["run", "--score", "gsm8k", "--data", str(GSM8K), "--limit", "2", "--threads", "1"]
        argv += ["--model-path", str(model), "--label", label, "--out", str(out), "--no-progress"]
        assert main(argv) == 0
        paths.append(out)
    return paths


def test_different_checkpoints_are_refused_unless_declared(
    runs: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", *map(str, runs)]) == 2
    assert "model differs" in capsys.readouterr().err
    assert main(["compare", *map(str, runs), "--checkpoints", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    (row,) = summary["kl"]
    assert (row["checkpoint_a"], row["checkpoint_b"]) == (
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "SmolLM2-135M-Instruct.Q8_0.gguf",
    )
    # requantising Q4_1 weights to Q8_0 is nearly lossless, but not exactly
    assert 0 < row["kl_mean"]["value"] < 0.01
    assert summary["warnings"] == []


def test_declared_checkpoints_still_need_the_same_tokenizer(runs: list[Path]) -> None:
    a, b = (read_run(p) for p in runs)
    assert a.header.engine["vocab_sha256"] == b.header.engine["vocab_sha256"]
    assert problems([a, b], checkpoints=True) == []
    engine = {**b.header.engine, "vocab_sha256": "0" * 64}
    b.header = b.header.model_copy(update={"engine": engine})
    assert any("tokenizers (vocabulary hash)" in p for p in problems([a, b], checkpoints=True))
    del engine["vocab_sha256"]
    b.header = b.header.model_copy(update={"engine": engine})
    assert any("no vocabulary hash" in p for p in problems([a, b], checkpoints=True))


EXPERIMENT = """
title = "Q4_1 against a requantised Q8_0"
model = "SmolLM2-135M-Instruct"
output = "{out}"
{declared}
[suites.prompts]
limit = 1
max_tokens = 8

[[configurations]]
label = "q4_1"
knobs = {{ threads = 1 }}

[[configurations]]
label = "q8_0"
knobs = {{ threads = 1 }}
model_path = "{q8}"
"""


def test_an_experiment_declares_checkpoints_and_the_report_names_them(tmp_path: Path, q8: Path) -> None:
    undeclared = tmp_path / "undeclared.toml"
    undeclared.write_text(EXPERIMENT.format(out=tmp_path / "u", declared="", q8=q8))
    with pytest.raises(ExperimentError, match=r"undeclared.toml:\d+: .*declare checkpoints = true"):
        load_experiment(undeclared)
    path = tmp_path / "ckpt.toml"
    path.write_text(EXPERIMENT.format(out=tmp_path / "out", declared="checkpoints = true", q8=q8))
    exp = load_experiment(path)
    assert exp.checkpoints and exp.config("q8_0").model_path == q8
    outcome = run_experiment(exp, progress=False)
    assert outcome.errors == 0 and len(outcome.ran) == 3
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [(p["a"], p["b"]) for p in summary["pairs"]] == [("q4_1", "q8_0")]  # compared, not refused
    models = {e["label"]: e["model"] for e in summary["engines"]}
    assert models == {"q4_1": default_model_path().name, "q8_0": q8.name}
    # the Method table names each configuration's weight file (Markdown escapes the "_")
    assert q8.name.replace("_", "\\_") in (tmp_path / "out" / "report.md").read_text()
