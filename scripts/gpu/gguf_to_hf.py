"""Convert a GGUF model into a Hugging Face folder in bf16, for vLLM (or any transformers loader).

    python3 scripts/gpu/gguf_to_hf.py GGUF OUT [--tokenizer-from DIR]

    MODEL=$(servediff models fetch qwen2.5-coder-0.5b | tail -1)
    python3 scripts/gpu/gguf_to_hf.py "$MODEL" qwen2.5-coder-0.5b-instruct

Needs torch, transformers (4.46 or later) and the gguf package: `pip install 'servediff[hf]'`
here, or the GPU image's transformers with the gguf wheel of vllm-wheels.txt there.

The weights written are the GGUF's own, dequantized: for the registry's Qwen2.5-Coder files that is
Q4_K_M brought back to bf16, **not** the publisher's bf16 release. A model served from this folder
answers like the GGUF (less the rounding of the dequantized values to bf16), which is what a
comparison against llama.cpp on the same file wants, and differs from the publisher's release
wherever quantization moved a token. The tokenizer and the chat template are the GGUF's too, unless
--tokenizer-from names a folder of the publisher's tokenizer files.

OUT gets config.json (without quantization_config: the weights are plain bf16 now),
model.safetensors, generation_config.json, the tokenizer files and chat_template.jinja, which is
always written (transformers 5 writes it itself; transformers 4 keeps the template inside
tokenizer_config.json, which vLLM and servediff both read less reliably). OUT is written under a
temporary name and renamed at the end, so a failed conversion leaves no half folder. Exit 0:
converted; 2: bad arguments, a missing package, or a GGUF that transformers cannot read (one line).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any


def fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def dtype_kwarg(transformers: Any, torch: Any) -> dict[str, Any]:
    """transformers 5 calls the argument ``dtype``; 4.x before 4.56 knows only ``torch_dtype``."""
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    return {key: torch.bfloat16}


def convert(gguf: Path, out: Path, tokenizer_from: Path | None) -> dict[str, Any]:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = dtype_kwarg(transformers, torch)
    start = time.perf_counter()
    source = tokenizer_from or gguf  # the tokenizer first: a wrong folder fails before the long load
    try:
        if tokenizer_from is None:
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        else:
            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_from))
    except (OSError, ValueError) as exc:
        raise ValueError(f"no tokenizer from {source}: {' '.join(str(exc).split())}") from None
    template = tokenizer.chat_template
    if not isinstance(template, str) or not template.strip():
        raise ValueError(f"{source} has no chat template (give --tokenizer-from a folder that has one)")
    # transformers dequantizes every tensor of the GGUF on load.
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, **dtype)

    # save_pretrained refuses a model that still says it is GGUF-quantized, so the model is built
    # again from its configuration without quantization_config, and the dequantized tensors are
    # moved into it (assign: no second copy of the weights in memory).
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, **dtype)
    result = plain.load_state_dict(loaded.state_dict(), strict=False, assign=True)
    # A model with tied embeddings points its output layer at the embedding again (the registry's
    # Qwen GGUFs carry an output layer of their own, so their folders are untied).
    plain.tie_weights()
    on_meta = [name for name, p in plain.named_parameters() if p.device.type == "meta"]
    if on_meta or result.unexpected_keys:
        raise ValueError(
            f"the GGUF's tensors do not fill the model: missing {on_meta}, extra {result.unexpected_keys}"
        )
    del loaded
    parameters = sum(p.numel() for p in plain.parameters())
    loaded_s = time.perf_counter() - start

    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
    if not (out / "chat_template.jinja").is_file():  # transformers 4: only in tokenizer_config.json
        (out / "chat_template.jinja").write_text(template, encoding="utf-8")
    config_path = out / "config.json"
    saved = json.loads(config_path.read_text(encoding="utf-8"))
    if "quantization_config" in saved:  # a safety net: vLLM would read it as a quantized checkpoint
        del saved["quantization_config"]
        config_path.write_text(json.dumps(saved, indent=2) + "\n", encoding="utf-8")
    return {
        "parameters": parameters,
        "load_s": loaded_s,
        "total_s": time.perf_counter() - start,
        "architecture": (saved.get("architectures") or ["?"])[0],
        "transformers": transformers.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "gguf", type=Path, help="the GGUF file (e.g. the path `servediff models fetch` prints)"
    )
    parser.add_argument("out", type=Path, help="the folder to write; must not exist yet")
    parser.add_argument(
        "--tokenizer-from",
        type=Path,
        metavar="DIR",
        help="take the tokenizer and chat template from this folder",
    )
    args = parser.parse_args(argv)
    if not args.gguf.is_file():
        return fail(f"{args.gguf}: no such file")
    if args.out.exists():
        return fail(f"{args.out}: exists already (choose a new folder)")
    if args.tokenizer_from is not None and not args.tokenizer_from.is_dir():
        return fail(f"--tokenizer-from {args.tokenizer_from}: no such folder")
    for module in ("torch", "transformers", "gguf"):
        try:
            __import__(module)
        except ImportError as exc:
            return fail(f"{module} does not import ({exc}): install torch, transformers and gguf")

    partial = args.out.with_name(f".{args.out.name}.partial-{os.getpid()}")
    try:
        facts = convert(args.gguf.resolve(), partial, args.tokenizer_from)
    except (ValueError, OSError, RuntimeError, KeyError) as exc:
        shutil.rmtree(partial, ignore_errors=True)
        return fail(f"{args.gguf}: {exc}".splitlines()[0])
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    partial.rename(args.out)
    files = sorted(p.name for p in args.out.iterdir())
    print(
        f"converted {args.gguf.name} ({facts['architecture']}, {facts['parameters']:,} parameters, "
        f"dequantized to bf16) into {args.out} in {facts['total_s']:.1f} s "
        f"({facts['load_s']:.1f} s to load and dequantize; transformers {facts['transformers']})"
    )
    print("files: " + ", ".join(files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
