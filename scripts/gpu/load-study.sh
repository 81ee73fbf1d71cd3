#!/usr/bin/env bash
# The GPU load study in one call: llama-server (CUDA) under concurrent load, through servediff.
#
#   STUDY_MODEL=model.gguf STUDY_GSM8K=gsm8k/test.jsonl OUT=packed scripts/gpu/load-study.sh
#
# Needs llama-server ($LLAMA_SERVER, default: the build of build-llama-server-cuda.sh in
# $LLAMA_BUILD, default $HOME/llama-cuda) and servediff importable (this checkout's src/, plus
# pydantic: the wheels of wheels.sh unpacked into $WHEELS_DIR, default $HOME/sd-wheels).
# Renders examples/llama-server-gpu.toml with the paths (study_file.py; its STUDY_* variables
# also shrink the study for a rehearsal), runs `servediff experiment` into $STUDY_DIR (default
# $HOME/gpu-load-study), stops it after $STUDY_TIME seconds (default 520) so that what exists is
# packed before an outer limit of 10 minutes, and packs the records and the report into $OUT:
# report.md, summary.json and study.tar.xz (gzip where there is no xz; in 15 MiB parts if larger).
# A second call with the same environment resumes: finished runs are kept, a run cut short
# continues from its last item.
# Exit 0: the study is complete (1: complete, a claim flagged); 3: stopped at the time limit (call
# again); other: failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
say() { echo "$(date -u +%T) $*"; }

: "${STUDY_MODEL:?set STUDY_MODEL to the GGUF}"
STUDY_DIR=${STUDY_DIR:-$HOME/gpu-load-study}
STUDY_TIME=${STUDY_TIME:-520}
OUT=${OUT:-$STUDY_DIR/packed}
LLAMA_BUILD=${LLAMA_BUILD:-$HOME/llama-cuda}
export LLAMA_SERVER=${LLAMA_SERVER:-$LLAMA_BUILD/build/bin/llama-server}
WHEELS_DIR=${WHEELS_DIR:-$HOME/sd-wheels}
export PYTHONPATH="$PWD/src${WHEELS_DIR:+:$WHEELS_DIR}${PYTHONPATH:+:$PYTHONPATH}"
PYTHON=${PYTHON:-python3}
export PYTHONUNBUFFERED=1  # progress lines reach the log as they happen
mkdir -p "$STUDY_DIR" "$OUT"

[ -f "$STUDY_MODEL" ] || { say "no model at $STUDY_MODEL"; exit 2; }
[ -x "$LLAMA_SERVER" ] || { say "no llama-server at $LLAMA_SERVER (build it, or set LLAMA_SERVER)"; exit 2; }
if [ -z "${STUDY_GSM8K:-}" ] && [ ! -f "${SERVEDIFF_DATA:-/nonexistent}/gsm8k/test.jsonl" ]; then
    export STUDY_GSM8K=scripts/data/gsm8k/test-100.jsonl  # the first 100 items, in the repository
    say "GSM8K: no STUDY_GSM8K given, using $STUDY_GSM8K"
fi
if [ -n "${STUDY_GSM8K:-}" ] && [ ! -f "$STUDY_GSM8K" ]; then say "no GSM8K file at $STUDY_GSM8K"; exit 2; fi
"$PYTHON" -c "import servediff.cli, pydantic" || { say "servediff does not import (pydantic on PYTHONPATH?)"; exit 2; }
say "llama-server: $LLAMA_SERVER ($("$LLAMA_SERVER" --version 2>&1 | grep -m1 -i version))"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader

STUDY_FILE=${STUDY_FILE:-examples/llama-server-gpu.toml}  # or examples/qwen-gpu-tuned.toml
study=$STUDY_DIR/$(basename "$STUDY_FILE")
"$PYTHON" scripts/gpu/study_file.py "$STUDY_FILE" "$study" || exit 2
"$PYTHON" -m servediff experiment "$study" --out "$STUDY_DIR/out" --check | tail -2 || { say "the experiment file is refused"; exit 2; }

say "experiment: up to $STUDY_TIME s"
start=$(date +%s)
timeout -k 30 "$STUDY_TIME" "$PYTHON" -m servediff experiment "$study" --out "$STUDY_DIR/out" --no-progress \
    2>&1 | while IFS= read -r line; do echo "$(date -u +%T) $line"; done | tee -a "$STUDY_DIR/progress.log"
rc=${PIPESTATUS[0]}
say "experiment exit $rc after $(( $(date +%s) - start )) s"

# --- audit: when `servediff audit` exists, check the finished study here, e.g. ---------------
#   "$PYTHON" -m servediff audit "$STUDY_DIR/out" > "$STUDY_DIR/out/audit.txt" || say "audit: exit $?"
# (its output lands in out/ and is packed with the rest below)
# ----------------------------------------------------------------------------------------------

say "packing into $OUT"
rm -f "$OUT"/study.tar.*
cp "$STUDY_DIR/progress.log" "$study" "$OUT"/ 2>/dev/null
for f in report.md summary.json; do [ -f "$STUDY_DIR/out/$f" ] && cp "$STUDY_DIR/out/$f" "$OUT"/; done
if command -v xz >/dev/null; then pack=(xz -T0 -6) ext=xz; else pack=(gzip -6) ext=gz; fi
tar -C "$STUDY_DIR" -cf - out | "${pack[@]}" > "$OUT/study.tar.$ext"
if [ "$(stat -c %s "$OUT/study.tar.$ext")" -gt $((15 * 1024 * 1024)) ]; then  # 16 MiB a file at most
    split -b 15M -d -a 1 "$OUT/study.tar.$ext" "$OUT/study.tar.$ext.part" && rm "$OUT/study.tar.$ext"
fi
ls -l "$OUT"
case $rc in
0) say "study complete"; exit 0 ;;
1) say "study complete, but a configuration's claim is flagged (see report.md)"; exit 1 ;;
124|137) say "stopped at $STUDY_TIME s: call again with the same environment to resume"; exit 3 ;;
*) say "servediff experiment failed (exit $rc): see progress.log"; exit "$rc" ;;
esac
