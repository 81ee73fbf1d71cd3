"""servediff's full-vocabulary KL against llama.cpp's own: ``llama-perplexity --kl-divergence``.

Both sides score the same tokens of the same two GGUF files. llama-perplexity tokenizes the text
(BOS where the vocabulary asks for it), cuts it into chunks of ``n_ctx`` tokens and scores
only the second half of every chunk (positions ``n_ctx/2 … n_ctx-2``); this script hands exactly
those (context, continuation) pairs to servediff's embedded engine (``score_matrix``: one
teacher-forced pass, full log-softmax) and summarises them with ``compare.kl.summarise``.

Why the two cannot be bit-identical, and what tolerance that implies:
- llama-perplexity stores the base model's log-probabilities as uint16 over [max − 16, max] nats
  (a step of 16/65535 ≈ 2.4e-4 nats) and drops tokens with p < e^-16 from the sum;
- the C++ binary and the Python binding may bundle different llama.cpp versions, whose kernels can
  differ in the last bits. The A/A row (the base file against itself) measures the first effect
  alone: whatever llama-perplexity reports there is its own quantisation floor.

    python bench/kl_crosscheck.py --perplexity PATH/llama-perplexity [--ctx 256] [--chunks 8]
    python bench/kl_crosscheck.py --perplexity PATH/llama-perplexity --model qwen2.5-coder-0.5b \
        --types Q3_K_M Q2_K
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servediff.compare.kl import KlSummary, SequenceDivergence, divergence_exact, kl_exact, summarise
from servediff.engines.knobs import LlamaKnobs, default_model_path
from servediff.engines.llamacpp import LlamaCppEngine
from servediff.models import resolve

ROOT = Path(__file__).resolve().parent.parent
TEXT = ROOT / "tests" / "data" / "gsm8k" / "test.jsonl"  # GSM8K solutions (MIT), committed

# "Mean    KLD:   0.004561 ±   0.000251", "99.0%   KLD:   0.041", "Same top p: 95.893 ± 0.365 %"
_PATTERNS = {
    "kl_mean": r"Mean\s+KLD:\s+([-\d.eE+]+)",
    "kl_max": r"Maximum KLD:\s+([-\d.eE+]+)",
    "kl_p99": r"99\.0%\s+KLD:\s+([-\d.eE+]+)",
    "kl_p90": r"90\.0%\s+KLD:\s+([-\d.eE+]+)",
    "kl_median": r"Median\s+KLD:\s+([-\d.eE+]+)",
    "same_top_pct": r"Same top p:\s+([-\d.eE+]+)",
    "ln_ppl_ratio": r"Mean ln\(PPL\(Q\)/PPL\(base\)\)\s*:\s+([-\d.eE+]+)",
}


@dataclass(frozen=True, slots=True)
class Side:
    """The statistics one implementation reports, in llama-perplexity's vocabulary."""

    kl_mean: float
    kl_max: float
    kl_p99: float
    kl_p90: float
    kl_median: float
    same_top_pct: float
    ln_ppl_ratio: float


def parse_perplexity(log: str) -> Side:
    """The KL block of llama-perplexity's output; a missing line is an error, not a zero."""
    values = {}
    for key, pattern in _PATTERNS.items():
        m = re.search(pattern, log)
        if m is None:
            raise ValueError(f"llama-perplexity output has no {key!r} line")
        values[key] = float(m.group(1))
    return Side(**values)


def from_summary(s: KlSummary) -> Side:
    p = s.kl_percentiles
    return Side(
        kl_mean=s.kl_mean,
        kl_max=s.kl_max,
        kl_p99=p[99.0],
        kl_p90=p[90.0],
        kl_median=p[50.0],
        same_top_pct=100.0 * s.same_top1,
        # llama-perplexity's ln(PPL(Q)/PPL(base)) is ours with B = Q, A = base
        ln_ppl_ratio=s.ln_ppl_ratio,
    )


def corpus(n_items: int = 40) -> str:
    rows = [json.loads(line) for line in TEXT.read_text(encoding="utf-8").splitlines() if line.strip()]
    return "\n\n".join(f"Question: {r['question']}\nAnswer: {r['answer']}" for r in rows[:n_items])


def chunks(engine: LlamaCppEngine, text: str, n_ctx: int, n_chunks: int) -> list[list[int]]:
    """llama-perplexity's chunks: the text cut every n_ctx tokens, each chunk starting with BOS
    only where the vocabulary asks for one (SmolLM2's does not: ``add_bos_token = false``)."""
    llm = engine._llm  # the engine's own tokenizer: the same vocabulary as the binary's
    add_bos = bool(llm._model.add_bos_token())
    tokens: list[int] = llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=False)
    out = []
    for i in range(min(n_chunks, len(tokens) // n_ctx)):
        chunk = tokens[i * n_ctx : (i + 1) * n_ctx]
        if add_bos:
            chunk[0] = llm.token_bos()
        out.append(chunk)
    if len(out) < 2:
        raise SystemExit(f"the text gives {len(out)} chunk(s) of {n_ctx} tokens: need at least 2")
    return out


def servediff_side(base: Path, other: Path, text: str, n_ctx: int, n_chunks: int) -> KlSummary:
    knobs = LlamaKnobs(threads=1, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx)
    a = LlamaCppEngine(knobs, model_path=base, scoring=True)
    b = LlamaCppEngine(knobs, model_path=other, scoring=True)
    first = n_ctx // 2
    seqs = []
    for chunk in chunks(a, text, n_ctx, n_chunks):
        context, continuation = chunk[: first + 1], chunk[first + 1 :]
        seqs.append(
            divergence_exact(
                a.score_matrix(context, continuation), b.score_matrix(context, continuation), continuation
            )
        )
    a.close()
    b.close()
    return summarise(seqs)


def perplexity_side(
    binary: Path, base: Path, other: Path, text: str, n_ctx: int, n_chunks: int, work: Path
) -> Side:
    """Base pass (writes the uint16 log-probabilities), then the KL pass of the other file.

    Flash attention off and one sequence per batch, as servediff's engine computes: the binary's
    defaults (``-fa auto``, several chunks per batch) would change the arithmetic being compared.
    """
    txt, dat = work / "text.txt", base_file(work)
    txt.write_text(text, encoding="utf-8")
    common = f"-c {n_ctx} -b {n_ctx} -ub {n_ctx} -t 1 -fa off --chunks {n_chunks}".split()
    subprocess.run(
        [str(binary), "-m", str(base), "-f", str(txt), "--kl-divergence-base", str(dat), *common],
        check=True,
        capture_output=True,
        text=True,
    )
    done = subprocess.run(
        [str(binary), "-m", str(other), "--kl-divergence-base", str(dat), "--kl-divergence", *common],
        check=True,
        capture_output=True,
        text=True,
    )
    return parse_perplexity(done.stdout + done.stderr)


def base_file(work: Path) -> Path:
    return work / "base.kld"


def read_base_file(path: Path) -> tuple[np.ndarray, list[np.ndarray]]:
    """llama-perplexity's ``--kl-divergence-base`` file: tokens (chunks × n_ctx) and, per chunk,
    the scored positions' log-probabilities (positions × vocabulary) decoded from uint16.

    Layout (tools/perplexity/perplexity.cpp): ``_logits_``, n_ctx (u32), n_vocab, n_chunk (i32),
    the tokens (i32), then per position 2·⌈n_vocab/2⌉ + 4 uint16: two float32 (scale, minimum
    log-probability) and one uint16 per token; log p = scale·q + minimum, where q = 0 means
    "below max − 16 nats": llama-perplexity leaves those tokens out of its KL sum, and so do we
    (−inf here). Spread over 49,152 tokens that floor would otherwise carry ~1 % of the mass.
    """
    raw = path.read_bytes()
    if raw[:8] != b"_logits_":
        raise ValueError(f"{path} is not a llama-perplexity log-probability file")
    n_ctx, n_vocab, n_chunk = (int(x) for x in np.frombuffer(raw[8:20], dtype=np.int32))
    off = 20 + 4 * n_ctx * n_chunk
    tokens = np.frombuffer(raw[20:off], dtype=np.int32).reshape(n_chunk, n_ctx)
    nv, n_pos = 2 * ((n_vocab + 1) // 2) + 4, n_ctx - 1 - n_ctx // 2
    blocks = []
    for _ in range(n_chunk):
        block = np.frombuffer(raw[off : off + 2 * n_pos * nv], dtype=np.uint16).reshape(n_pos, nv)
        off += 2 * n_pos * nv
        head = block[:, :4].copy().view(np.float32).astype(np.float64)  # (scale, minimum) per row
        q = block[:, 4 : 4 + n_vocab]
        blocks.append(np.where(q > 0, head[:, :1] * q + head[:, 1:2], -np.inf))
    return tokens, blocks


def cross_build(base: Path, dat: Path, text: str, n_ctx: int, n_chunks: int) -> KlSummary:
    """The same GGUF through both builds: llama-perplexity's stored base against servediff's
    engine (the Python binding's llama.cpp). Measures how far the two llama.cpp builds differ
    before any configuration changes, which bounds how closely the KL rows can agree."""
    a = LlamaCppEngine(
        LlamaKnobs(threads=1, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx), model_path=base, scoring=True
    )
    tokens, blocks = read_base_file(dat)
    first = n_ctx // 2
    seqs = []
    for chunk, theirs, stored in zip(chunks(a, text, n_ctx, n_chunks), blocks, tokens):
        if stored.tolist() != chunk:
            raise SystemExit("llama-perplexity tokenized the text differently from servediff's engine")
        ours = a.score_matrix(chunk[: first + 1], chunk[first + 1 :])
        rows, nxt = np.arange(len(ours)), np.asarray(chunk[first + 1 :])
        seqs.append(
            SequenceDivergence(
                kl=kl_exact(theirs, ours),
                same_top1=theirs.argmax(axis=1) == ours.argmax(axis=1),
                # a next token below the stored floor gets the floor, as llama-perplexity's own
                # nll does: this is where its A/A ln(PPL ratio) comes from
                logp_a=np.maximum(theirs[rows, nxt], theirs.max(axis=1) - 16.0),
                logp_b=ours[rows, nxt],
            )
        )
    a.close()
    return summarise(seqs)


def requantise(src: Path, out: Path, ftype: int) -> Path:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    params.nthread = 1
    if llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), params) != 0:
        raise SystemExit(f"could not quantise {src} to ftype {ftype}")
    return out


def compare(
    binary: Path, pairs: Sequence[tuple[str, Path, Path]], n_ctx: int, n_chunks: int, work: Path
) -> list[dict[str, object]]:
    text = corpus()
    rows: list[dict[str, object]] = []
    for name, base, other in pairs:
        ours = from_summary(servediff_side(base, other, text, n_ctx, n_chunks))
        theirs = perplexity_side(binary, base, other, text, n_ctx, n_chunks, work)
        rows.append({"pair": name, "servediff": ours, "llama-perplexity": theirs})
        if base == other:  # the base file now holds this model's log-probabilities: compare builds
            rows.append(
                {
                    "pair": f"{name}, across builds",
                    "servediff": from_summary(cross_build(base, base_file(work), text, n_ctx, n_chunks)),
                }
            )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--perplexity", type=Path, required=True, help="the llama-perplexity binary")
    ap.add_argument("--ctx", type=int, default=256, help="chunk length in tokens (default 256)")
    ap.add_argument("--chunks", type=int, default=8, help="chunks scored (default 8)")
    ap.add_argument("--model", help="base GGUF path or registry name (default: SmolLM2, Q4_1)")
    ap.add_argument("--base-type", default="Q4_1", help="the base file's type, for the table")
    ap.add_argument("--types", nargs="+", default=["Q8_0", "Q4_K_M"], help="requantised types compared")
    args = ap.parse_args(argv)
    import llama_cpp

    base = resolve(args.model) if args.model else default_model_path()
    name = args.base_type
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        pairs = [(f"{name} vs {name}", base, base)]
        for kind in args.types:
            ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{kind.upper()}")
            pairs.append((f"{name} vs {kind}", base, requantise(base, work / f"{kind}.gguf", ftype)))
        rows = compare(args.perplexity, pairs, args.ctx, args.chunks, work)
    keys = ("kl_mean", "kl_p99", "kl_median", "kl_max", "same_top_pct", "ln_ppl_ratio")
    print("| pair | tool | " + " | ".join(keys) + " |")
    print("|---|---|" + "---|" * len(keys))
    for row in rows:
        for tool in ("servediff", "llama-perplexity"):
            side = row.get(tool)
            if side is None:
                continue
            assert isinstance(side, Side)
            print(f"| {row['pair']} | {tool} | " + " | ".join(f"{getattr(side, k):.6g}" for k in keys) + " |")
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
