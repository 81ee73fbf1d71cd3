"""The bare loop of part 2: send prepared requests one at a time with httpx, nothing else.

    bench/.venv/bin/python bench/bare_httpx.py --requests reqs.jsonl --out texts.json

Each line of ``--requests`` is {"url": ..., "body": {...}}: the very bodies servediff sends.
The texts are written afterwards only so the benchmark can check both sent the same requests.
"""

from __future__ import annotations

import argparse
import json

import httpx


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with open(args.requests, encoding="utf-8") as f:
        reqs = [json.loads(line) for line in f]
    texts = {}
    with httpx.Client(timeout=600) as client:
        for r in reqs:
            resp = client.post(r["url"], json=r["body"])
            resp.raise_for_status()
            choice = resp.json()["choices"][0]
            texts[r["id"]] = choice["message"]["content"] if "message" in choice else choice["text"]
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(texts, f)


if __name__ == "__main__":
    main()
