"""Imports refuse what cannot be trusted, and compare re-checks the setup of runs imported apart.

Every log here was written by lm-eval 0.4.13 or Inspect 0.3.285 themselves against a real
llama.cpp server of SmolLM2 (or lm-eval's own ``hf`` backend on the CPU): the ``--only trust``
and ``--only hf`` runs of scripts/make_import_fixtures.py. Each figure servediff reports is
checked against the tool's own number, or against a count made here straight from the log.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from servediff.cli import main
from servediff.compare import quality
from servediff.compare.stats import PairedCounts, paired_ci, verdict
from servediff.compare.study import build_study
from servediff.records import read_run

DATA = Path(__file__).parent / "data" / "importers"
LM = DATA / "lm_eval"
INSPECT = DATA / "inspect"


def one(folder: Path, pattern: str) -> Path:
    (path,) = sorted(folder.glob(pattern))
    return path


def inspect_log(name: str) -> Path:
    return one(INSPECT / name, "*.json")


def lm_samples(name: str) -> Path:
    return one(LM / name, "*/samples_*.jsonl")


def lm_results(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(one(LM / name, "*/results_*.json").read_text())
    return data


def imp(source: str, paths: list[Path], labels: list[str], out: Path, *extra: str) -> int:
    labelled = [a for x in labels for a in ("--label", x)]
    return main(["import", source, *map(str, paths), *labelled, "--out", str(out), *extra])


def accuracy(path: Path) -> float:
    items = [it for it in read_run(path).items.values() if it.correct is not None]
    return sum(it.correct is True for it in items) / len(items)


# --- Inspect: logs that do not hold the whole run ---------------------------------------------
def test_inspect_log_without_samples_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = inspect_log("no-samples")
    assert json.loads(log.read_text()).get("samples") is None  # as Inspect wrote it
    out = tmp_path / "a.jsonl"
    assert imp("inspect", [log], ["a"], out) == 2
    err = capsys.readouterr().err
    assert f"{log}: the log holds no samples" in err and "--no-log-samples" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("name, status", [("failed", "error"), ("cancelled", "cancelled")])
def test_failed_and_cancelled_runs_are_refused_unless_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, status: str
) -> None:
    log = inspect_log(name)
    raw = json.loads(log.read_text())
    assert raw["status"] == status
    present, total = len(raw["samples"]), (raw.get("results") or {}).get("total_samples")
    out = tmp_path / "a.jsonl"
    assert imp("inspect", [log], ["a"], out) == 2
    err = capsys.readouterr().err
    assert f"{log}: the run's status is {status!r}" in err and "--allow-incomplete" in err
    assert not out.exists()
    # Compared with what the log says it evaluated: the cancelled run holds 5 of its 10.
    if total is not None:
        assert f"it holds {present} sample(s) of the {total} its results count" in err
    else:
        assert "records no results.total_samples" in err
    assert imp("inspect", [log], ["a"], out, "--allow-incomplete") == 0
    assert len(read_run(out).items) == present
    assert "imported although the run's status" in capsys.readouterr().err


def test_truncated_eval_log_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    whole = one(INSPECT / "eval-format", "*.eval")
    cut = tmp_path / whole.name
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    assert imp("inspect", [cut], ["a"], tmp_path / "a.jsonl") == 2
    err = capsys.readouterr().err
    assert f"{cut}: not a complete .eval log" in err and "Traceback" not in err


# --- unknown temperature ---------------------------------------------------------------------
def test_unknown_temperature_is_unknown_and_compare_needs_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = inspect_log("no-temperature")
    assert "temperature" not in json.loads(log.read_text())["eval"]["model_generate_config"]
    a, b = tmp_path / "stock.jsonl", tmp_path / "default.jsonl"
    assert imp("inspect", [inspect_log("stock")], ["stock"], a, "--epoch", "1") == 0
    assert imp("inspect", [log], ["default"], b) == 0
    assert "recorded as unknown" in capsys.readouterr().err
    assert read_run(b).header.sampling.temperature is None
    assert main(["compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "temperature not recorded" in err and "--force" in err
    assert main(["compare", str(a), str(b), "--force"]) == 0
    out = capsys.readouterr().out
    assert "forced despite: inspect/gsm8k:" in out and "temperature not recorded" in out


# --- setup re-checked at compare time --------------------------------------------------------
def test_one_chat_log_under_two_filters_is_refused_at_compare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = lm_samples("chat-stock")
    a, b = tmp_path / "strict.jsonl", tmp_path / "flexible.jsonl"
    assert imp("lm-eval", [log], ["strict"], a, "--filter", "strict-match") == 0
    assert imp("lm-eval", [log], ["flexible"], b, "--filter", "flexible-extract") == 0
    ra, rb = read_run(a), read_run(b)
    assert all(ra.items[i].text == rb.items[i].text for i in ra.items)  # the same texts
    assert main(["compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "different filter ('flexible-extract' vs 'strict-match')" in err


def test_two_templates_imported_apart_are_refused_at_compare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "plain.jsonl", tmp_path / "terse.jsonl"
    assert imp("inspect", [inspect_log("stock")], ["plain"], a, "--epoch", "1") == 0
    assert imp("inspect", [inspect_log("terse")], ["terse"], b) == 0
    assert main(["compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    # The pairing key holds the prompt as sent, so the suite hashes differ too.
    assert "the prompts differ" in err and "different prompt template" in err
    # Imported together, the refusal names the part that differs: the prompt, not the documents.
    assert imp("inspect", [inspect_log("stock"), inspect_log("terse")], ["p", "t"], tmp_path / "x") == 2
    assert (
        "6 item(s) with different prompts (the same documents, asked differently)" in capsys.readouterr().err
    )


def test_chat_and_plain_refusal_says_the_prompt_differs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = [lm_samples("chat-stock"), lm_samples("plain-stock")]
    assert imp("lm-eval", paths, ["chat", "plain"], tmp_path / "x") == 2
    err = capsys.readouterr().err
    assert "with different prompts (the same documents, asked differently)" in err
    assert "different documents" not in err


def test_inspect_prompt_is_the_conversation_as_sent(tmp_path: Path) -> None:
    log = inspect_log("stock")
    raw = json.loads(log.read_text())["samples"]
    out = tmp_path / "a.jsonl"
    assert imp("inspect", [log], ["a"], out, "--epoch", "1") == 0
    run = read_run(out)
    for s in (x for x in raw if x["epoch"] == 1):
        sent = [{"role": m["role"], "content": m["content"]} for m in s["messages"][:-1]]
        assert run.items[str(s["id"])].input == sent
        assert sent[0]["content"].startswith("Solve this math problem.")  # the template applied
    md = tmp_path / "r.md"
    assert main(["report", str(out), "--md", str(md)]) == 0
    assert "(chat messages)" in md.read_text() and "raw prompt" not in md.read_text()


# --- a samples file without its results file -------------------------------------------------
def test_samples_without_results_are_refused_unless_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alone = tmp_path / lm_samples("chat-stock").name
    shutil.copy(lm_samples("chat-stock"), alone)
    out = tmp_path / "a.jsonl"
    assert imp("lm-eval", [alone], ["a"], out) == 2
    err = capsys.readouterr().err
    results = "results_" + alone.name.split("_local_")[1].replace(".jsonl", ".json")
    assert f"{alone}: its results file {results} cannot be read" in err and "--allow-incomplete" in err
    assert not out.exists()
    assert imp("lm-eval", [alone], ["a"], out, "--allow-incomplete") == 0
    h = read_run(out).header
    assert h.sampling.seed is None and h.engine["model"] == "unknown" and h.engine["base_url"] is None
    assert "model, server and seed not recorded" in capsys.readouterr().err
    # A cut file beside its results file: the count says so.
    folder = tmp_path / "cut"
    shutil.copytree(lm_samples("chat-stock").parent, folder)
    cut = one(folder, "samples_*.jsonl")
    cut.write_text("".join(cut.read_text().splitlines(keepends=True)[:6]))
    assert imp("lm-eval", [cut], ["a"], tmp_path / "b.jsonl") == 2
    assert "6 sample(s) under filter 'strict-match', but its results file says 10" in capsys.readouterr().err


# --- labels ----------------------------------------------------------------------------------
def test_hf_chat_template_is_recorded_with_its_hash(tmp_path: Path) -> None:
    results = lm_results("hf-chat")
    out = tmp_path / "a.jsonl"
    assert imp("lm-eval", [lm_samples("hf-chat")], ["hf"], out, "--filter", "strict-match") == 0
    run = read_run(out)
    options = run.header.engine["options"]
    assert options["client"] == "hf" and options["chat_template"] is True
    assert options["chat_template_sha256"] == results["chat_template_sha"] and results["chat_template"]
    assert accuracy(out) == results["results"]["gsm8k_local"]["exact_match,strict-match"]
    assert all(str(it.input).startswith("<|im_start|>") for it in run.items.values())  # as sent
    md = tmp_path / "r.md"
    assert main(["report", str(out), "--md", str(md)]) == 0
    assert "prompt with the chat template applied" in md.read_text()


def test_where_and_latency_not_recorded_are_said(tmp_path: Path) -> None:
    # A log whose URL came from the provider's environment variable records none: as here.
    raw = json.loads(inspect_log("tuned").read_text())
    raw["eval"]["model_base_url"] = None
    log = tmp_path / "tuned.json"
    log.write_text(json.dumps(raw))
    out = tmp_path / "i.jsonl"
    assert imp("inspect", [log], ["i"], out) == 0
    lm = tmp_path / "lm"
    paths = [lm_samples("chat-stock"), lm_samples("chat-tuned")]
    assert imp("lm-eval", paths, ["stock", "tuned"], lm, "--filter", "strict-match") == 0
    md = tmp_path / "r.md"
    assert main(["report", str(out), *map(str, sorted(lm.glob("*.jsonl"))), "--md", str(md)]) == 0
    text = md.read_text()
    assert "| `i` | inspect | openai-api/llamacpp/smollm2 | not recorded |" in text
    # lm-eval logs no timings: the speed rows say so instead of 0 ms.
    for label in ("stock", "tuned"):
        assert f"| lm-eval/gsm8k\\_local | `{label}` | 0 | 0 (0, 0) | n/a | n/a | not recorded |" in text
    assert " ms" not in text


# --- log-likelihood tasks --------------------------------------------------------------------
def test_tied_log_likelihoods_are_flagged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = lm_samples("mmlu-loglik")
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    ties = sum(len({r[0][0] for r in s["resps"]}) == 1 for s in lines)
    # llama-cpp-python's server gave one document 0.0 for every choice (a tie lm-eval scores
    # right, its gold being the first choice), and real log-likelihoods for the others.
    assert (ties, len(lines)) == (1, 5)
    out = tmp_path / "a.jsonl"
    assert imp("lm-eval", [path], ["a"], out) == 0
    assert "1 of 5 item(s) score every choice alike" in capsys.readouterr().err
    assert accuracy(out) == lm_results("mmlu-loglik")["results"][one_task(path)]["acc,none"]
    assert read_run(out).header.extra["imported_from"]["tied_items"] == ties
    assert main(["report", str(out)]) == 0
    assert "their answers and scores carry no information" in capsys.readouterr().out


def one_task(path: Path) -> str:
    return path.name.split("samples_")[1].rsplit("_2026", 1)[0]


def test_acc_norm_uses_the_normalised_likelihoods(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = lm_samples("hf-mmlu-loglik")
    tool = lm_results("hf-mmlu-loglik")["results"][one_task(path)]
    picks: dict[str, tuple[int, int]] = {}
    for line in path.read_text().splitlines():
        s = json.loads(line)
        lls = [float(r[0][0]) for r in s["resps"]]
        lens = [len(a["arg_1"]) for a in s["arguments"].values()]
        raw = max(range(4), key=lambda i: lls[i])
        norm = max(range(4), key=lambda i: lls[i] / lens[i])
        picks[str(s["doc_id"])] = (raw, norm)
    for metric, k in (("acc", 0), ("acc_norm", 1)):
        out = tmp_path / f"{metric}.jsonl"
        assert imp("lm-eval", [path], [metric], out, "--metric", metric) == 0
        assert accuracy(out) == tool[f"{metric},none"]
        assert {i: int(it.answer or -1) for i, it in read_run(out).items.items()} == {
            i: p[k] for i, p in picks.items()
        }
    assert any(raw != norm for raw, norm in picks.values())  # the two metrics pick differently
    # Imported apart, the two readings of one log are not two configurations.
    assert main(["compare", str(tmp_path / "acc.jsonl"), str(tmp_path / "acc_norm.jsonl")]) == 2
    assert "different metric ('acc_norm' vs 'acc')" in capsys.readouterr().err


# --- an A/A of 10 identical items ------------------------------------------------------------
def test_identical_items_cannot_establish_non_inferiority(tmp_path: Path) -> None:
    # 5 right and 5 wrong under both: Newcombe's interval is the point [0, 0] (φ = 1).
    ci = paired_ci(PairedCounts(both=5, b=0, c=0, neither=5))
    assert ci.low == pytest.approx(-(1 - 0.025**0.1)) and ci.high == pytest.approx(1 - 0.025**0.1)
    assert verdict(ci, 0.01) == "inconclusive"
    # The Inspect control (two epochs at temperature 0): identical, and too few to say more.
    folder = tmp_path / "runs"
    assert imp("inspect", [inspect_log("stock")], ["stock"], folder) == 0
    study = build_study([read_run(p) for p in sorted(folder.glob("*.jsonl"))])
    (control,) = quality.quality(study, 0.01).pairs
    assert control.table.b == control.table.c == 0 and control.verdict == "inconclusive"
    assert control.delta_ci.low < -0.01


# --- hostile logs (#26.7): one line naming the file and field, exit 2, nothing written ---------
def lm_line(edit: Any) -> str:
    first = json.loads(lm_samples("chat-stock").read_text().splitlines()[0])
    return json.dumps(edit(first))


def inspect_edit(edit: Any) -> str:
    raw = json.loads(inspect_log("tuned").read_text())
    edit(raw)
    return json.dumps(raw)


def _set(d: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    d[key] = value
    return d


HOSTILE: dict[str, tuple[str, Any, str]] = {
    "lm-eval resps 5": ("lm-eval", lambda: lm_line(lambda s: _set(s, "resps", 5)), "field resps"),
    "lm-eval arguments {}": ("lm-eval", lambda: lm_line(lambda s: _set(s, "arguments", {})), "no arguments"),
    "lm-eval arguments 3": ("lm-eval", lambda: lm_line(lambda s: _set(s, "arguments", 3)), "field arguments"),
    "lm-eval doc_id null": ("lm-eval", lambda: lm_line(lambda s: _set(s, "doc_id", None)), "field doc_id"),
    "lm-eval line is a list": ("lm-eval", lambda: "[1, 2]", "not an lm-eval samples line"),
    "inspect no samples key": (
        "inspect",
        lambda: inspect_edit(lambda r: r.pop("samples")),
        "the log holds no samples",
    ),
    "inspect samples 'x'": (
        "inspect",
        lambda: inspect_edit(lambda r: _set(r, "samples", "x")),
        "field samples",
    ),
    "inspect null sample": (
        "inspect",
        lambda: inspect_edit(lambda r: r["samples"].append(None)),
        "field samples.6",
    ),
    "inspect scores 7": (
        "inspect",
        lambda: inspect_edit(lambda r: _set(r["samples"][0], "scores", 7)),
        "field samples.0.scores",
    ),
    "inspect output 'x'": (
        "inspect",
        lambda: inspect_edit(lambda r: _set(r["samples"][0], "output", "x")),
        "field samples.0.output",
    ),
    "inspect eval 5": ("inspect", lambda: inspect_edit(lambda r: _set(r, "eval", 5)), "field eval"),
    "inspect version '2'": ("inspect", lambda: inspect_edit(lambda r: _set(r, "version", "2")), "version"),
    "inspect logprobs junk": (
        "inspect",
        lambda: inspect_edit(
            lambda r: _set(r["samples"][0]["output"]["choices"][0], "logprobs", {"content": [{"x": 1}]})
        ),
        "logprobs: malformed",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_logs_end_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    source, make, field = HOSTILE[case]
    name = "samples_gsm8k_local_2026-12-01T04-50-44.490128.jsonl" if source == "lm-eval" else "log.json"
    path = tmp_path / name
    path.write_text(make() + "\n")
    out = tmp_path / "out.jsonl"
    assert imp(source, [path], ["a"], out, "--allow-incomplete") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}") and field in err, err
    assert len(err.strip().splitlines()) == 1 and not out.exists()


def test_import_does_not_overwrite_another_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "a.jsonl"
    assert imp("inspect", [inspect_log("stock")], ["stock"], out, "--epoch", "1") == 0
    before = out.read_bytes()
    assert imp("inspect", [inspect_log("tuned")], ["tuned"], out) == 2
    assert f"{out} holds another run ('stock' #1" in capsys.readouterr().err
    assert out.read_bytes() == before
    # The same import again may rewrite its own record.
    assert imp("inspect", [inspect_log("stock")], ["stock"], out, "--epoch", "1") == 0
    other = tmp_path / "notes.jsonl"
    other.write_text("my notes\n")
    assert imp("inspect", [inspect_log("tuned")], ["tuned"], other) == 2
    assert other.read_text() == "my notes\n" and "is not a record to replace" in capsys.readouterr().err


def test_duplicated_inspect_sample(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = json.loads(inspect_log("tuned").read_text())
    raw["samples"].append(raw["samples"][2])
    raw["results"]["total_samples"] += 1  # as a log that counted it would say
    log = tmp_path / "dup.json"
    log.write_text(json.dumps(raw))
    out = tmp_path / "a.jsonl"
    # Byte-identical twice: kept once, with a note (and the count then falls short by one).
    assert imp("inspect", [log], ["a"], out, "--allow-incomplete") == 0
    err = capsys.readouterr().err
    assert "1 duplicated sample(s) dropped" in err
    assert sum(1 for line in out.read_text().splitlines()[1:]) == len(raw["samples"]) - 1
    # The same id and epoch with other content: which answer is the model's is unknown.
    raw["samples"][-1] = {**raw["samples"][2], "output": {**raw["samples"][2]["output"], "completion": "x"}}
    log.write_text(json.dumps(raw))
    assert imp("inspect", [log], ["a"], tmp_path / "b.jsonl", "--allow-incomplete") == 2
    assert "appears twice with different content" in capsys.readouterr().err
