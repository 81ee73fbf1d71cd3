"""Requantise a GGUF with llama.cpp's own quantiser (llama-cpp-python's binding), one thread.

    python scripts/requantise.py qwen2.5-coder-0.5b Q3_K_M q3_k_m.gguf

The source is a path or a registry name (``servediff models``); the type is a llama.cpp file type
without its prefix (Q8_0, Q4_K_M, Q3_K_M, Q2_K, ...). ``allow_requantize`` is set: the source is
already quantised, so the result carries both roundings (a study of quantisation error, not a
way to make a good checkpoint).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import llama_cpp

from servediff.models import resolve


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", help="GGUF path or registry name")
    ap.add_argument("type", help="llama.cpp file type, e.g. Q3_K_M")
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{args.type.upper()}", None)
    if ftype is None:
        print(f"error: unknown file type {args.type!r}", file=sys.stderr)
        return 2
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    params.nthread = 1
    if (
        llama_cpp.llama_model_quantize(str(resolve(args.source)).encode(), str(args.out).encode(), params)
        != 0
    ):
        print(f"error: llama.cpp could not quantise to {args.type}", file=sys.stderr)
        return 2
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
