#!/usr/bin/env bash
# The H200 studies in one go, once llama-server is built and the model joined (start it under
# `setsid nohup … &`: it outlives the call that starts it, and later calls only wait for ROOT/done):
#
#   STUDY_MODEL=qwen.gguf STUDY_GSM8K=gsm8k/test.jsonl scripts/gpu/all-studies.sh ROOT
#
#   ROOT/load    the load study (examples/llama-server-gpu.toml through load-study.sh)
#   ROOT/audit   `servediff audit` of -np 8 (expected to fail under load) and of -np 1 (its bound),
#                each with the other as the negative control (examples/audit-llama-server.toml)
#   ROOT/tuned   stock vs flash attention + KV q8_0 + prompt cache (examples/qwen-gpu-tuned.toml)
#   ROOT/all.tar.xz, in 15 MiB parts where larger, and ROOT/done when every study has run.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$1
mkdir -p "$root/audit"
say() { echo "$(date -u +%T) $*" | tee -a "$root/all.log"; }
: "${STUDY_MODEL:?set STUDY_MODEL to the GGUF}"
WHEELS_DIR=${WHEELS_DIR:-$HOME/sd-wheels}
export PYTHONPATH="$PWD/src:$WHEELS_DIR" PYTHONUNBUFFERED=1
export LLAMA_SERVER=${LLAMA_SERVER:-${LLAMA_BUILD:-$HOME/llama-cuda}/build/bin/llama-server}

say "load study"
STUDY_DIR=$root/load STUDY_TIME=${LOAD_TIME:-1500} OUT=$root/load/packed bash scripts/gpu/load-study.sh \
    >"$root/load.log" 2>&1
say "load study: exit $?"

# The audit's file names SmolLM2; here the server serves the study's model.
python3 - "$root/audit/audit.toml" <<'PY'
import os, sys, tomllib
sys.path.insert(0, "scripts/gpu")
import study_file
raw = tomllib.loads(open("examples/audit-llama-server.toml", encoding="utf-8").read())
raw["model"] = os.environ.get("STUDY_MODEL_ID", "qwen2.5-coder-0.5b-instruct")
raw["model_path"] = os.path.abspath(os.environ["STUDY_MODEL"])
open(sys.argv[1], "w", encoding="utf-8").write(study_file.dump(raw))
PY
for promise in np8 np1; do
    control=$([ "$promise" = np8 ] && echo np1 || echo np8)
    say "audit: promise $promise, negative control $control"
    timeout -k 30 "${AUDIT_TIME:-420}" python3 -m servediff audit --experiment "$root/audit/audit.toml" \
        --promise "$promise" --control "$control" --levels 8 --trials "${AUDIT_TRIALS:-25}" \
        --out "$root/audit/$promise" --md "$root/audit/$promise.md" --junit "$root/audit/$promise.xml" \
        >"$root/audit/$promise.log" 2>&1
    say "audit $promise: exit $?"
done

say "tuned study"
STUDY_FILE=examples/qwen-gpu-tuned.toml STUDY_DIR=$root/tuned STUDY_TIME=${TUNED_TIME:-1200} \
    OUT=$root/tuned/packed bash scripts/gpu/load-study.sh >"$root/tuned.log" 2>&1
say "tuned study: exit $?"

say "packing"
tar -C "$root" --exclude='*/out' -cf - . 2>/dev/null | xz -T0 -6 > "$root.tar.xz"
mv "$root.tar.xz" "$root/all.tar.xz"
if [ "$(stat -c %s "$root/all.tar.xz")" -gt $((15 * 1024 * 1024)) ]; then
    split -b 15M -d -a 1 "$root/all.tar.xz" "$root/all.tar.xz.part" && rm "$root/all.tar.xz"
fi
touch "$root/done"
say "done"
