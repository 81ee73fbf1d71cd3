"""The transformers engine on the CPU: every knob runs, the control is identical, knobs change the math.

The SmolLM2 GGUF is loaded once through transformers' GGUF loader (the engine's default path)
and saved as a local model folder, which the other engines load in a second instead of
de-quantizing the GGUF each time.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the hf extra is not installed: pip install 'servediff[hf]'")
pytest.importorskip("gguf", reason="the hf extra is not installed: pip install 'servediff[hf]'")

import torch
import transformers

from servediff.cli import main
from servediff.engines.hf import HFEngine, cut_at_stop, left_pad
from servediff.engines.hf_knobs import HFKnobs
from servediff.records import read_run
from servediff.suites import SuiteOptions, load_suite
from servediff.types import Completion, SamplingParams

SUITE = load_suite("prompts", SuiteOptions(limit=2))
PARAMS = SamplingParams(max_tokens=8, top_logprobs=3)
CPU = HFKnobs(device="cpu")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    engine = HFEngine(dataclasses.replace(CPU, dtype="fp32"), label="gguf")  # the default GGUF
    assert engine.model_path.suffix == ".gguf" and engine.stops == [2]  # <|im_end|>, not the GGUF's EOS
    folder = tmp_path_factory.mktemp("smollm2")
    # A GGUF-loaded model refuses save_pretrained (it counts as quantized): copy its de-quantized
    # weights into a plain model of the same configuration and save that.
    config = copy.deepcopy(engine.model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(engine.model.state_dict())
    plain.save_pretrained(folder)
    engine.tok.save_pretrained(folder)
    engine.close()
    yield folder


def generate(knobs: HFKnobs, model: Path, params: SamplingParams = PARAMS) -> dict[str, Completion]:
    engine = HFEngine(knobs, model_path=model, label="t")
    out: list[Completion] = []
    engine.generate(SUITE.samples, params, out.append)
    engine.close()
    return {c.item_id: c for c in out}


@pytest.fixture(scope="module")
def reference(model_dir: Path) -> dict[str, Completion]:
    return generate(CPU, model_dir)


def test_control_is_identical(model_dir: Path, reference: dict[str, Completion]) -> None:
    again = generate(CPU, model_dir)
    for item_id, c in reference.items():
        assert c.error is None and c.token_source == "engine" and c.n_tokens == len(c.token_ids or [])
        assert (c.text, c.token_ids) == (again[item_id].text, again[item_id].token_ids)
        assert [lp.top for lp in c.logprobs or []] == [lp.top for lp in again[item_id].logprobs or []]


def test_logprobs_are_the_logits_that_chose_each_token(reference: dict[str, Completion]) -> None:
    for c in reference.values():
        assert c.logprobs is not None and c.token_ids is not None and len(c.logprobs) == len(c.token_ids)
        for lp, token in zip(c.logprobs, c.token_ids):
            assert len(lp.top) == 3 and lp.token_id == token and lp.logprob <= 0
            values = [v for _, v in lp.top]
            assert values == sorted(values, reverse=True)
            assert lp.logprob == values[0]  # greedy: the chosen token is the top-1 (ties aside)


def test_fp32_changes_the_computation(model_dir: Path, reference: dict[str, Completion]) -> None:
    fp32 = generate(dataclasses.replace(CPU, dtype="fp32"), model_dir)
    first = {k: c.logprobs[0].logprob for k, c in reference.items() if c.logprobs}
    other = {k: c.logprobs[0].logprob for k, c in fp32.items() if c.logprobs}
    assert first.keys() == other.keys() and first != other


@pytest.mark.parametrize(
    "knobs",
    [
        dataclasses.replace(CPU, batch_size=2),
        dataclasses.replace(CPU, attn="eager"),
        dataclasses.replace(CPU, dtype="fp16"),
        dataclasses.replace(CPU, prompt_lookup=3),
    ],
    ids=["batch2", "eager", "fp16", "prompt-lookup"],
)
def test_every_knob_generates(model_dir: Path, knobs: HFKnobs) -> None:
    engine = HFEngine(knobs, model_path=model_dir, label="k")
    out: list[Completion] = []
    engine.generate(SUITE.samples, PARAMS, out.append)
    ident = engine.identity()
    engine.close()
    assert [c.item_id for c in out] == [s.id for s in SUITE.samples]
    assert all(c.error is None and c.n_tokens == 8 and c.logprobs for c in out)
    assert ident["knobs"] == {**knobs.as_dict(), "device": "cpu"}
    batches = {c.engine_meta["batch"] for c in out if c.engine_meta}
    assert len(batches) == (1 if knobs.batch_size == 2 else 2)


def test_draft_model(model_dir: Path, reference: dict[str, Completion]) -> None:
    # The model as its own draft: every draft token is accepted, so the verification pass
    # computes several positions at once and the text must still be a greedy completion.
    out = generate(dataclasses.replace(CPU, draft_model=str(model_dir)), model_dir)
    assert all(c.error is None and c.n_tokens == 8 for c in out.values())
    assert out.keys() == reference.keys()


def test_identity_records_hardware_and_versions(model_dir: Path) -> None:
    engine = HFEngine(CPU, model_path=model_dir, label="id")
    ident = engine.identity()
    engine.close()
    hw = ident["hardware"]
    assert hw["device"] == "cpu" and hw["versions"]["torch"] and hw["versions"]["transformers"]
    assert {"tf32_matmul", "tf32_cudnn", "float32_matmul_precision"} <= hw.keys()
    assert len(ident["model_sha256"]) == 64 and ident["stop_token_ids"] == [2]


def test_probe_matches_the_first_generated_token(model_dir: Path, reference: dict[str, Completion]) -> None:
    engine = HFEngine(CPU, model_path=model_dir, label="p")
    sample = SUITE.samples[0]
    probe = engine.probe(sample, [], "", 3)
    engine.close()
    first = reference[sample.id].logprobs
    assert first is not None and "one forward pass" in probe.method
    # Prefill of the prompt is the same computation in the run and in the probe.
    assert probe.top == first[0].top


def test_run_command_writes_a_record(model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "hf.jsonl"
    argv = ["run", "--engine", "hf", "--device", "cpu", "--model-path", str(model_dir), "--limit", "1"]
    rc = main(
        [*argv, "--max-tokens", "4", "--dtype", "fp32", "--attn", "eager", "--out", str(out), "--no-progress"]
    )
    assert rc == 0
    run = read_run(out)
    assert run.header.engine["kind"] == "hf" and run.header.engine["knobs"]["dtype"] == "fp32"
    item = next(iter(run.items.values()))
    assert item.n_tokens == 4 and item.metadata["engine"]["batch_items"] == 1
    assert json.loads(out.read_text().splitlines()[1])["token_ids"] == item.token_ids


def test_bad_knobs() -> None:
    with pytest.raises(ValueError, match="batch_size 1"):
        HFKnobs(batch_size=2, prompt_lookup=4)
    with pytest.raises(ValueError, match="dtype"):
        HFKnobs(dtype="int8")
    assert (
        main(
            [
                "run",
                "--engine",
                "hf",
                "--dtype",
                "fp16",
                "--batch-size",
                "2",
                "--prompt-lookup",
                "3",
                "--out",
                "unused.jsonl",
            ]
        )
        == 2
    )


def test_padding_and_stop() -> None:
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=2)
    assert ids.tolist() == [[5, 6, 7], [2, 2, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert cut_at_stop([4, 5, 2, 2], [2]) == ([4, 5], "stop")
    assert cut_at_stop([4, 5], [2]) == ([4, 5], None)


def test_the_gpu_study_runs_on_the_experiment_conductor(model_dir: Path, tmp_path: Path) -> None:
    """`demo --engine hf` is a built-in experiment: the reference twice (the control), each other
    configuration once, every configuration compared with the reference only."""
    out = tmp_path / "hf"
    argv = ["demo", "--engine", "hf", "--device", "cpu", "--model-path", str(model_dir), "--out", str(out)]
    only = ["--only", "bf16-batch2", "fp32-b1"]
    assert main([*argv, "--limit", "2", "--max-tokens", "4", *only, "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert [(c["a"], c["b"]) for c in summary["controls"]] == [("bf16-b1", "bf16-b1")]
    assert sorted((c["a"], c["b"]) for c in summary["pairs"]) == [
        ("bf16-b1", "bf16-batch2"),
        ("bf16-b1", "fp32-b1"),
    ]
    assert summary["controls"][0]["identical"] == summary["controls"][0]["total"] == 2
    runs = sorted((out / "runs").rglob("*.jsonl"))
    headers = [read_run(p).header for p in runs]
    assert sorted(h.label for h in headers) == ["bf16-b1", "bf16-b1", "bf16-batch2", "fp32-b1"]
    assert all(h.engine["kind"] == "hf" and h.engine["knobs"]["device"] == "cpu" for h in headers)
    assert (out / "report.md").is_file() and (out / "report.html").is_file()
