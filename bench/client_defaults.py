"""What a client that relies on the server's defaults gets, against what servediff measures.

    python bench/client_defaults.py --tokens 300 --threads 1

Starts ``python -m llama_cpp.server`` (SmolLM2, the package's GGUF) stock and tuned (flash
attention and prompt-lookup drafting, as in the first study), sends the 20 chat prompts at
temperature 0 the way the study's own client did (model, messages, temperature, seed,
max_tokens: nothing else), and runs ``servediff run`` on the same server twice: ``--send all``
(every sampling field explicit, repeat penalty 1.0 included) and ``--send minimal``
(temperature, seed and max_tokens only). Prints, per server, how many of the 20 texts each run
shares with the client's.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from servediff.cli import main as servediff
from servediff.records import read_run
from servediff.suites.prompts import PROMPTS
from tests.conftest import TUNED_FLAGS, LlamaServer

TUNED = TUNED_FLAGS


def client(base: str, prompt: str, tokens: int) -> str:
    """The study's own request: the fields a typical client names, no more."""
    body = {"model": "smollm2", "messages": [{"role": "user", "content": prompt}], "temperature": 0,
            "seed": 42, "max_tokens": tokens}  # fmt: skip
    req = urllib.request.Request(
        f"{base}/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        return str(json.loads(r.read())["choices"][0]["message"]["content"])


def run(base: str, folder: Path, send: str, tokens: int) -> dict[str, str]:
    out = folder / f"{send}.jsonl"
    argv = ["run", "--engine", "http", "--base-url", base, "--suite", "prompts", "--max-tokens", str(tokens),
            "--send", send, "--label", send, "--out", str(out), "--no-progress"]  # fmt: skip
    assert servediff(argv) == 0
    return {k: i.text for k, i in read_run(out).items.items()}


def measure(name: str, extra: list[str], tokens: int, threads: int, folder: Path) -> None:
    server = LlamaServer([*extra, "--model_alias", "smollm2"], folder / f"{name}.log", threads=threads)
    try:
        theirs = {k: client(server.base_url, p, tokens) for k, p in PROMPTS.items()}
        for send in ("all", "minimal"):
            ours = run(server.base_url, folder / name, send, tokens)
            same = sum(ours[k] == theirs[k] for k in theirs)
            print(f"{name}: client (temperature, seed, max_tokens) vs servediff --send {send}: "
                  f"{same}/{len(theirs)} identical", flush=True)  # fmt: skip
    finally:
        server.stop()


def cli() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--servers", default="stock,tuned")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.servers.split(","):
            (Path(tmp) / name).mkdir()
            measure(name, TUNED if name == "tuned" else [], args.tokens, args.threads, Path(tmp))


if __name__ == "__main__":
    cli()
