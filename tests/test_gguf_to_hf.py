"""The vLLM recipe on the CPU: the GGUF → bf16 Hugging Face conversion (scripts/gpu/gguf_to_hf.py)
and its agreement with llama.cpp on the same file (scripts/gpu/hf_agreement.py), for the shipped
SmolLM2 and, when it is in the model cache, Qwen2.5-Coder-0.5B (`servediff models fetch
qwen2.5-coder-0.5b`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from servediff.engines.knobs import default_model_path
from servediff.models import entry
from servediff.models.cache import cached
from tests.helpers.scripts import load_script

pytest.importorskip("transformers", reason="the hf extra is not installed: pip install 'servediff[hf]'")
pytest.importorskip("gguf", reason="the hf extra is not installed: pip install 'servediff[hf]'")
pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")

GPU = Path(__file__).resolve().parent.parent / "scripts" / "gpu"


def _script(name: str) -> ModuleType:
    return load_script(GPU / f"{name}.py")


def test_bad_arguments_are_one_line_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    convert = _script("gguf_to_hf")
    out = tmp_path / "out"
    assert convert.main([str(tmp_path / "missing.gguf"), str(out)]) == 2
    assert "missing.gguf: no such file" in capsys.readouterr().err
    out.mkdir()
    assert convert.main([str(default_model_path()), str(out)]) == 2
    assert "exists already" in capsys.readouterr().err
    assert (
        convert.main(
            [str(default_model_path()), str(tmp_path / "new"), "--tokenizer-from", str(tmp_path / "x")]
        )
        == 2
    )
    assert "--tokenizer-from" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()  # a folder without tokenizer files: refused before the weights are loaded
    assert (
        convert.main([str(default_model_path()), str(tmp_path / "new"), "--tokenizer-from", str(empty)]) == 2
    )
    assert f"no tokenizer from {empty}" in capsys.readouterr().err
    empty.rmdir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and not any(out.iterdir())


def _models() -> list[object]:
    # The 0.5B takes minutes on two cores: only when asked for (SERVEDIFF_SLOW_CONVERSION=1) and
    # fetched; SmolLM2 runs the same checks every time.
    qwen = cached(entry("qwen2.5-coder-0.5b")) if os.environ.get("SERVEDIFF_SLOW_CONVERSION") else None
    skip = pytest.mark.skip(
        reason="set SERVEDIFF_SLOW_CONVERSION=1 and `servediff models fetch qwen2.5-coder-0.5b` to run it"
    )
    return [
        pytest.param(default_model_path(), id="smollm2-135m"),
        pytest.param(qwen, id="qwen2.5-coder-0.5b", marks=() if qwen else skip),
    ]


@pytest.mark.parametrize("gguf", _models())
def test_conversion_keeps_the_gguf_weights_template_and_greedy_tokens(gguf: Path, tmp_path: Path) -> None:
    import gguf as gguf_package
    import numpy as np
    import torch
    from safetensors import safe_open

    out = tmp_path / "hf"
    # a child process, as the script runs: its memory is returned when it ends
    done = subprocess.run(
        [sys.executable, str(GPU / "gguf_to_hf.py"), str(gguf), str(out)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r"converted .* \([A-Za-z0-9]+, [\d,]+ parameters, dequantized to bf16\)", done.stdout)
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"} <= {
        p.name for p in out.iterdir()
    }
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config
    assert config.get("dtype", config.get("torch_dtype")) == "bfloat16"
    assert not list(tmp_path.glob(".hf.partial-*"))  # written under a temporary name, then renamed

    # The weights are the GGUF's own, dequantized and rounded to bf16: one tensor, exactly.
    reader = gguf_package.GGUFReader(str(gguf))
    tensor = next(t for t in reader.tensors if t.name == "blk.0.ffn_down.weight")
    expected = torch.from_numpy(gguf_package.dequantize(tensor.data, tensor.tensor_type).astype(np.float32))
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        saved = f.get_tensor("model.layers.0.mlp.down_proj.weight")
    assert saved.dtype == torch.bfloat16
    assert torch.equal(saved, expected.to(torch.bfloat16))

    # The chat template, the prompt text and its ids as vLLM would render them equal servediff's
    # rendering of the GGUF's template, and the greedy tokens of the two engines agree.
    agreement = _script("hf_agreement")
    facts = agreement.measure(out, gguf, agreement.PROMPT, 8, "float32")
    assert facts["template_same"] and facts["text_same"] and facts["ids_same"], facts
    assert facts["greedy_agree"] == 8, facts
