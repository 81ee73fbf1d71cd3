"""Every stock-vs-tuned divergence gets a measured gap, on the embedded engine and on servers.

Where a run recorded its own logprobs and a probe asked again afterwards, the probe of the stock
configuration must reproduce the recorded gap (it replays generation's geometry).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from servediff.cli import main
from servediff.compare.mechanism import PairMechanism, measure_pair
from servediff.compare.study import build_study
from servediff.engines.knobs import CONFIGS
from servediff.engines.llamacpp import LlamaCppEngine
from servediff.engines.openai_http import HTTPEngine, HTTPOptions
from servediff.engines.template import TemplateProber, load_template
from servediff.probe import probe_pair
from servediff.records import Run, read_run
from servediff.records.probes import read_probes
from servediff.runner import RunPlan, execute
from servediff.suites import Suite, SuiteOptions, load_suite
from servediff.types import SamplingParams
from tests.conftest import TUNED_FLAGS, LlamaServer

# Embedded: fizzbuzz and reverse-list part ways within 36 tokens under `tuned` (measured).
SUITE = load_suite("prompts", SuiteOptions(limit=3))
SAMPLING = SamplingParams(max_tokens=36, top_logprobs=5)
# Server: these part ways within the first 5 tokens under the tuned flags (measured on a
# GGML_NATIVE=OFF build); one more prompt that stays identical keeps the censored
# (no-divergence) side of the hazard exercised.
SERVER_IDS = ("regex-dates", "translate-es", "verse-haiku", "explain-tcp")
SERVER_SUITE = dataclasses.replace(
    load_suite("prompts"), samples=tuple(s for s in load_suite("prompts").samples if s.id in SERVER_IDS)
)
SERVER_SAMPLING = SamplingParams(max_tokens=12, top_logprobs=5)
TOLERANCE = 1e-3


def record(suite: Suite, engine: object, label: str, out: Path, sampling: SamplingParams = SAMPLING) -> Run:
    execute(RunPlan(suite, label, out, sampling), engine, progress=False)  # type: ignore[arg-type]
    return read_run(out)


def check_every_divergence(m: PairMechanism) -> None:
    assert m.explanations, "no divergence: the test would prove nothing"
    for e in m.explanations:
        # a gap is measured, or the class says why it could not be
        assert e.gap_a is not None or e.note, e
        assert e.a is not None and e.b is not None, e
        # the recorded gap and the probe's gap for A agree
        assert e.a_probe is not None and e.a.gap is not None and e.a_probe.gap is not None
        assert abs(e.a_probe.gap - e.a.gap) < TOLERANCE, (e.point, e.a, e.a_probe)
        assert e.a_probe.top[0][0] == e.a.top[0][0]
    assert m.drift is not None and m.drift.max > 0
    assert m.hazard is not None and m.hazard.events == len(m.explanations)


def test_embedded_stock_vs_tuned(tmp_path: Path) -> None:
    runs = []
    for label in ("stock", "tuned"):
        engine = LlamaCppEngine(CONFIGS[label], label=label)
        runs.append(record(SUITE, engine, label, tmp_path / f"{label}.jsonl"))
        engine.close()
    probes = tmp_path / "probes.jsonl"
    # the CLI rebuilds each engine from its run header's knobs
    assert main(["probe", str(runs[0].path), str(runs[1].path), "--out", str(probes)]) == 0
    ps = read_probes(probes)
    assert ps.a == ("stock", 1) and ps.b == ("tuned", 1) and ps.k == 5
    m = measure_pair(build_study(runs).pairs[0], [ps])
    check_every_divergence(m)
    assert all(e.a_probe is not None and "n_batch chunks" in e.a_probe.source for e in m.explanations)
    md = tmp_path / "report.md"
    assert main(["compare", str(runs[0].path), str(runs[1].path), str(probes), "--md", str(md)]) == 0
    text = md.read_text()
    assert "## Why the text diverges — measured" in text and "**Hazard:**" in text


@pytest.fixture(scope="module")
def tuned_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    server = LlamaServer(TUNED_FLAGS, tmp_path_factory.mktemp("tuned") / "server.log")
    yield server
    server.stop()


def test_server_stock_vs_tuned(llama_server: LlamaServer, tuned_server: LlamaServer, tmp_path: Path) -> None:
    engines = [
        HTTPEngine(HTTPOptions(s.base_url), label=lab)
        for s, lab in ((llama_server, "stock"), (tuned_server, "tuned"))
    ]
    runs = [record(SERVER_SUITE, e, e.label, tmp_path / f"{e.label}.jsonl", SERVER_SAMPLING) for e in engines]
    template = load_template(Path(llama_server.model))
    probers = [TemplateProber(e, template, replay=True) for e in engines]
    ps = probe_pair(
        (runs[0], runs[1]),
        (probers[0], probers[1]),
        tmp_path / "probes.jsonl",
        template_source=template.source,
    )
    assert ps.template_source and "GGUF metadata" in ps.template_source
    m = measure_pair(build_study(runs).pairs[0], [ps])
    check_every_divergence(m)
    assert all(e.a_probe is not None and "replayed" in e.a_probe.source for e in m.explanations)


# Raw prompts whose greedy first token is SmolLM2's end token (<|im_end|>): the answer is already
# written in the prompt. The other goes on: the pair diverges at token 0, one side at its end.
ENDS = "<|im_start|>user\nSay OK.<|im_end|>\n<|im_start|>assistant\nOK."
GOES = "<|im_start|>user\nSay OK.<|im_end|>\n<|im_start|>assistant\n"


def test_a_completion_that_ends_at_its_first_token_records_the_end_token_s_top_k(tmp_path: Path) -> None:
    """Before: an EOS-first completion recorded no logprobs, so a divergence at token 0 against it
    was classified from one side alone ("B's top-k not obtained")."""
    from servediff.compare.divergence import first_token
    from servediff.compare.mechanism import NOT_MEASURED, explain

    records = {}
    for name, prompt in (("ends", ENDS), ("goes", GOES)):
        suite = tmp_path / f"{name}.jsonl"
        suite.write_text(json.dumps({"id": "p", "prompt": prompt}) + "\n")
        out = tmp_path / f"{name}-run.jsonl"
        argv = ["run", "--suite", str(suite), "--max-tokens", "4", "--top-logprobs", "5", "--threads", "1",
                "--label", name, "--out", str(out), "--no-progress"]  # fmt: skip
        assert main(argv) == 0
        records[name] = read_run(out).items["p"]
    ended, went = records["ends"], records["goes"]
    assert ended.text == "" and ended.finish_reason == "stop" and ended.logprobs == []
    assert ended.stop_logprobs is not None
    token, logprob, top = ended.stop_logprobs
    assert token == "" and len(top) == 5 and top[0][1] == logprob and top[0][1] > top[1][1]
    assert went.text and (went.stop_logprobs is not None) == (went.finish_reason == "stop")
    point = first_token("p", ended, went)
    assert point is not None and point.index == 0 and point.a_token is None
    e = explain(point, (ended, went), {})
    assert e.cls != NOT_MEASURED and e.a is not None and e.b is not None
    assert e.gap_a is not None and e.gap_a > 0
    assert "not obtained" not in e.note
