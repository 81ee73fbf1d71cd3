"""Check a folder written by gguf_to_hf.py against its GGUF, on the CPU: the same chat template, the
same prompt text and token ids, and the same greedy tokens from transformers as from llama.cpp.

    PYTHONPATH=src python3 scripts/gpu/hf_agreement.py FOLDER GGUF [--tokens 16] [--need 8]

The prompt text is rendered three ways, which must agree: as vLLM renders it (transformers'
apply_chat_template with the folder's chat_template.jinja), as servediff renders the folder's
template for a probe (`--template FOLDER`), and as servediff renders the GGUF's
tokenizer.chat_template metadata; its token ids from transformers' tokenizer and from llama.cpp's
must agree too. The greedy tokens compare the dequantized weights in transformers (computing in
float32 by default, so that only the weights' rounding to bf16 differs) with llama.cpp on the
quantized file (one thread). The two compute differently, so a long continuation may part at a
near tie; the first --need tokens must agree, and where they part the transformers side's top-two
logit gap is printed.

Prints one JSON line of what it measured. Exit 0: the template, the text and the ids are the same
and the first --need greedy tokens agree; 1: something differs (the line says what); 2: usage.
Needs torch, transformers, gguf, llama-cpp-python and servediff (src/) on the path.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

PROMPT = "Write a Python function that returns the n-th Fibonacci number."


def measure(folder: Path, gguf: Path, prompt: str, tokens: int, dtype: str) -> dict[str, Any]:
    import llama_cpp
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from servediff.engines.template import load_template

    torch.set_num_threads(1)  # the CPU is shared; one thread like llama.cpp's below
    messages = [{"role": "user", "content": prompt}]
    gguf_template = load_template(gguf)
    gguf_text = gguf_template.render(messages)  # type: ignore[arg-type]
    folder_text = load_template(folder).render(messages)  # type: ignore[arg-type]
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    hf_text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    jinja = (folder / "chat_template.jinja").read_text(encoding="utf-8")

    llm = llama_cpp.Llama(model_path=str(gguf), n_ctx=1024, n_threads=1, seed=42, verbose=False)
    gguf_ids = llm.tokenize(gguf_text.encode(), add_bos=False, special=True)
    hf_ids = tokenizer(hf_text, add_special_tokens=False)["input_ids"]

    start = time.perf_counter()
    cpp: list[int] = []
    for token in llm.generate(gguf_ids, temp=0.0, top_k=1):  # greedy
        cpp.append(int(token))
        if len(cpp) == tokens:
            break
    cpp_s = time.perf_counter() - start

    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=getattr(torch, dtype))
    with torch.no_grad():
        out = model.generate(
            torch.tensor([hf_ids]),
            max_new_tokens=tokens,
            do_sample=False,
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=tokenizer.pad_token_id,
        )
    hf = [int(t) for t in out.sequences[0][len(hf_ids) :]]
    hf_s = time.perf_counter() - start

    agree = next((n for n, (a, b) in enumerate(zip(hf, cpp)) if a != b), min(len(hf), len(cpp)))
    facts: dict[str, Any] = {
        "template_same": jinja == gguf_template.template,
        "text_same": hf_text == gguf_text == folder_text,
        "ids_same": list(hf_ids) == list(gguf_ids),
        "prompt_tokens": len(gguf_ids),
        "greedy_agree": agree,
        "greedy_tokens": min(len(hf), len(cpp)),
        "dtype": dtype,
        "llama_cpp_s": round(cpp_s, 1),
        "transformers_s": round(hf_s, 1),
        "text": tokenizer.decode(hf[:agree]),
    }
    if agree < min(len(hf), len(cpp)):
        top2 = torch.topk(out.scores[agree][0].float(), 2).values
        facts["gap_at_parting"] = round(float(top2[0] - top2[1]), 4)  # logits: a near tie is small
        facts["parting"] = {
            "transformers": tokenizer.decode([hf[agree]]),
            "llama.cpp": llm.detokenize([cpp[agree]]).decode(errors="replace"),
        }
    return facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the folder gguf_to_hf.py wrote")
    parser.add_argument("gguf", type=Path, help="the GGUF it was converted from")
    parser.add_argument("--prompt", default=PROMPT, help="the user message (default: a short coding request)")
    parser.add_argument("--tokens", type=int, default=16, help="greedy tokens to generate on each side")
    parser.add_argument("--need", type=int, default=8, help="leading greedy tokens that must agree")
    parser.add_argument(
        "--dtype", choices=("float32", "bfloat16"), default="float32", help="transformers' compute"
    )
    args = parser.parse_args(argv)
    if not (args.folder / "config.json").is_file():
        print(f"error: {args.folder}: no config.json (not a converted folder)", file=sys.stderr)
        return 2
    if not args.gguf.is_file():
        print(f"error: {args.gguf}: no such file", file=sys.stderr)
        return 2
    if not 0 < args.need <= args.tokens:
        print("error: --need must be between 1 and --tokens", file=sys.stderr)
        return 2
    facts = measure(args.folder, args.gguf, args.prompt, args.tokens, args.dtype)
    print(json.dumps(facts, ensure_ascii=False))
    same = facts["template_same"] and facts["text_same"] and facts["ids_same"]
    return 0 if same and facts["greedy_agree"] >= args.need else 1


if __name__ == "__main__":
    sys.exit(main())
