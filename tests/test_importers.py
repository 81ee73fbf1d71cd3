"""Importing lm-evaluation-harness and Inspect logs written by the tools themselves.

The logs under tests/data/importers were written by lm-eval (``local-chat-completions
--apply_chat_template`` and ``local-completions``) and Inspect (``openai-api``, ``match(numeric=True)``)
against two llama.cpp server configurations of SmolLM2 (scripts/make_import_fixtures.py; versions in
tests/data/importers/versions.json). Every imported figure is checked against the tool's own
results and against a count made here straight from the tool's per-sample lines.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from servediff.cli import main
from servediff.compare import quality
from servediff.compare.study import Study, build_study
from servediff.records import Run, read_run
from tests.helpers.records import Line, write_run

DATA = Path(__file__).parent / "data" / "importers"
LM = DATA / "lm_eval"
INSPECT = DATA / "inspect"
TOOLS = json.loads((DATA / "versions.json").read_text())


def samples(run: str, task: str) -> Path:
    (path,) = sorted((LM / run).glob(f"*/samples_{task}_*.jsonl"))
    return path


def results(run: str) -> dict[str, Any]:
    (path,) = sorted((LM / run).glob("*/results_*.json"))
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def inspect_log(run: str) -> Path:
    (path,) = sorted((INSPECT / run).glob("*.json"))
    return path


GSM = "gsm8k_local"
MMLU = "mmlu_high_school_geography_local"


def run_import(source: str, paths: list[Path], labels: list[str], out: Path, *extra: str) -> int:
    labelled = [a for x in labels for a in ("--label", x)]
    return main(["import", source, *map(str, paths), *labelled, "--out", str(out), *extra])


def study_of(folder: Path) -> Study:
    return build_study([read_run(p) for p in sorted(folder.glob("*.jsonl"))])


def rows(path: Path, filter_name: str) -> dict[str, dict[str, Any]]:
    """lm-eval's sample lines of one filter, by doc id, read here without servediff."""
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return {str(r["doc_id"]): r for r in lines if r["filter"] == filter_name}


def answered(r: dict[str, Any]) -> str | None:
    value = r["filtered_resps"][0]
    return None if value in ("[invalid]", "") else str(value)


def direct_counts(a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]]) -> dict[str, int]:
    """b/c, same answer (both answered, equal) and identical texts, counted from the raw lines."""
    ids = sorted(a)
    return {
        "b": sum(a[i]["exact_match"] == 1 and b[i]["exact_match"] == 0 for i in ids),
        "c": sum(a[i]["exact_match"] == 0 and b[i]["exact_match"] == 1 for i in ids),
        "same_answer": sum(answered(a[i]) is not None and answered(a[i]) == answered(b[i]) for i in ids),
        "identical": sum(a[i]["resps"][0][0] == b[i]["resps"][0][0] for i in ids),
    }


def imported_counts(study: Study) -> dict[str, int]:
    (q,) = [q for q in quality.quality(study, 0.01).pairs if q.kind == "pair"]
    return {"b": q.table.b, "c": q.table.c, "same_answer": q.same_answer, "identical": q.identical}


@pytest.mark.parametrize(
    ("kind", "task", "filter_name"),
    [("chat", GSM, "strict-match"), ("chat", GSM, "flexible-extract"), ("mmlu", MMLU, None)],
)
def test_lm_eval_chat_import_matches_the_tool_and_the_samples(
    tmp_path: Path, kind: str, task: str, filter_name: str | None
) -> None:
    runs = (f"{kind}-stock", f"{kind}-tuned")
    paths = [samples(run, task) for run in runs]
    chosen = ["--filter", filter_name] if filter_name else []
    assert run_import("lm-eval", paths, ["stock", "tuned"], tmp_path, *chosen) == 0
    study = study_of(tmp_path)
    filter_name = filter_name or "first-letter"
    raw = [rows(p, filter_name) for p in paths]
    for acc, run, lines in zip(quality.quality(study, 0.01).accuracies, runs, raw):
        tool = results(run)["results"][task][f"exact_match,{filter_name}"]
        assert acc.correct / acc.n == pytest.approx(tool)
        assert acc.correct == sum(r["exact_match"] == 1 for r in lines.values())
        assert acc.unanswered == sum(answered(r) is None for r in lines.values())
    assert imported_counts(study) == direct_counts(*raw)


def test_lm_eval_chat_prompt_is_the_messages_and_gold_the_number(tmp_path: Path) -> None:
    assert run_import("lm-eval", [samples("chat-stock", GSM)], ["stock"], tmp_path / "s.jsonl") == 0
    run = read_run(tmp_path / "s.jsonl")
    first = run.items["0"]
    assert isinstance(first.input, list) and first.input[0]["role"] == "user"
    assert first.input[0]["content"].startswith("Question: Janet")
    assert first.gold == "18"  # not the worked solution
    invalid = [it for it in run.items.values() if it.answer is None]
    assert invalid and all(it.correct is False for it in invalid)  # "[invalid]": no answer, scored wrong
    assert "[invalid]" not in {it.answer for it in run.items.values()}


def test_lm_eval_invalid_is_no_answer_and_never_agrees(tmp_path: Path) -> None:
    paths = [samples("chat-stock", GSM), samples("chat-tuned", GSM)]
    raw = [rows(p, "strict-match") for p in paths]
    both_failed = [i for i in raw[0] if answered(raw[0][i]) is None and answered(raw[1][i]) is None]
    assert both_failed  # the logs hold items where neither configuration's answer was extracted
    assert run_import("lm-eval", paths, ["stock", "tuned"], tmp_path) == 0
    study = study_of(tmp_path)
    assert imported_counts(study)["same_answer"] == 0  # not len(both_failed): no answer never agrees
    stock = read_run(tmp_path / "stock-1.jsonl")
    assert all(stock.items[i].answer is None for i in both_failed)


def test_lm_eval_header_says_where_and_how_it_ran(tmp_path: Path) -> None:
    paths = [samples("chat-stock", GSM), samples("chat-tuned", GSM)]
    assert run_import("lm-eval", paths, ["stock", "tuned"], tmp_path) == 0
    stock, tuned = read_run(tmp_path / "stock-1.jsonl"), read_run(tmp_path / "tuned-1.jsonl")
    urls = [r.header.engine["base_url"] for r in (stock, tuned)]
    assert urls == [results(n)["config"]["model_args"]["base_url"] for n in ("chat-stock", "chat-tuned")]
    assert urls[0] != urls[1] and urls[0].endswith("/v1/chat/completions")
    options = stock.header.engine["options"]
    assert options["client"] == "local-chat-completions" and options["chat_template"] is True
    assert stock.header.engine["model"] == "smollm2"
    source = stock.header.extra["imported_from"]
    assert source["tool_version"] == TOOLS["lm_eval"] == "0.4.13"
    assert (source["task"], source["filter"], source["metric"]) == (GSM, "strict-match", "exact_match")
    assert source["prompt_template"] == results("chat-stock")["configs"][GSM]["doc_to_text"]
    assert stock.header.sampling.temperature == 0.0 and stock.header.sampling.max_tokens == 192
    files = [str(tmp_path / "stock-1.jsonl"), str(tmp_path / "tuned-1.jsonl")]
    md = tmp_path / "r.md"
    assert main(["compare", *files, "--md", str(md)]) == 0
    assert main(["report", *files, "--html", str(tmp_path / "r.html")]) == 0
    method = md.read_text().split("## Method", 1)[1].split("\n## ", 1)[0]
    html = (tmp_path / "r.html").read_text()
    for text in (method, html):
        assert "lm-eval 0.4.13" in text and "filter strict-match" in text and urls[1] in text
        assert "local-chat-completions" in text


def test_lm_eval_plain_completions_import(tmp_path: Path) -> None:
    paths = [samples("plain-stock", GSM), samples("plain-tuned", GSM)]
    assert run_import("lm-eval", paths, ["stock", "tuned"], tmp_path) == 0
    stock = read_run(tmp_path / "stock-1.jsonl")
    assert isinstance(stock.items["0"].input, str) and stock.items["0"].input.startswith("Question: Janet")
    assert stock.header.engine["options"]["chat_template"] is False
    assert imported_counts(study_of(tmp_path)) == direct_counts(*[rows(p, "strict-match") for p in paths])


def test_lm_eval_temperature_is_what_was_sent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hot = samples("chat-stock-t08", GSM)
    assert run_import("lm-eval", [hot], ["hot"], tmp_path / "hot.jsonl") == 0
    assert read_run(tmp_path / "hot.jsonl").header.sampling.temperature == 0.8
    capsys.readouterr()
    out = tmp_path / "pair"
    assert run_import("lm-eval", [samples("chat-stock", GSM), hot], ["stock", "hot"], out) == 2
    assert "different sampling" in capsys.readouterr().err and not out.exists()
    assert run_import("lm-eval", [samples("chat-stock", GSM), hot], ["stock", "hot"], out, "--force") == 0
    files = [str(p) for p in sorted(out.glob("*.jsonl"))]
    assert main(["compare", *files]) == 2  # compare refuses too, unless forced
    assert main(["compare", *files, "--force"]) == 0


def copy_run(run: str, folder: Path) -> Path:
    """A copy of one lm-eval output folder (samples and results), to damage in a test."""
    (model,) = (LM / run).iterdir()
    shutil.copytree(model, folder)
    return folder


def test_lm_eval_refusals_name_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.jsonl"
    (res,) = sorted((LM / "chat-stock").glob("*/results_*.json"))
    assert run_import("lm-eval", [res], ["a"], out) == 2
    assert "results file" in capsys.readouterr().err
    bad = tmp_path / "samples_x_2026-01-01T00-00-00.000001.jsonl"
    bad.write_bytes(samples("chat-stock", GSM).read_bytes()[:200] + b"\xff\xfe")
    assert run_import("lm-eval", [bad], ["a"], out) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "UTF-8" in err and "Traceback" not in err
    # A samples file shorter than its results file says.
    short = copy_run("chat-stock", tmp_path / "short")
    path = next(short.glob(f"samples_{GSM}_*.jsonl"))
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-2]))
    assert run_import("lm-eval", [path], ["a"], out, "--filter", "flexible-extract") == 2
    assert "results file says 10" in capsys.readouterr().err
    # An edited prompt no longer matches lm-eval's prompt_hash.
    edited = copy_run("chat-stock", tmp_path / "edited")
    path = next(edited.glob(f"samples_{GSM}_*.jsonl"))
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    lines[0]["arguments"]["gen_args_0"]["arg_0"][0] += " "
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert run_import("lm-eval", [path], ["a"], out) == 2
    assert "prompt_hash" in capsys.readouterr().err
    paths = [samples("chat-stock", GSM), samples("mmlu-tuned", MMLU)]
    assert run_import("lm-eval", paths, ["a", "b"], tmp_path / "o") == 2
    assert "different tasks" in capsys.readouterr().err


def test_compare_refuses_runs_with_nothing_in_common(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_import("lm-eval", [samples("chat-stock", GSM)], ["a"], tmp_path / "a.jsonl") == 0
    assert run_import("lm-eval", [samples("mmlu-tuned", MMLU)], ["b"], tmp_path / "b.jsonl") == 0
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]) == 2
    assert "nothing to compare" in capsys.readouterr().err


def native_from_lm_eval(path: Path, label: str, out: Path) -> Path:
    """The same completions and scores as a native run, read straight from the samples JSON."""
    lines = [
        Line(
            i,
            r["resps"][0][0],
            answer=answered(r),
            gold=str(r["target"]).rsplit("####", 1)[-1].strip(),
            correct=r["exact_match"] == 1,
        )
        for i, r in sorted(rows(path, "strict-match").items(), key=lambda x: int(x[0]))
    ]
    return write_run(out, label, lines, suite=f"lm-eval/{GSM}")


def test_lm_eval_import_gives_the_native_study(tmp_path: Path) -> None:
    paths = {"stock": samples("chat-stock", GSM), "tuned": samples("chat-tuned", GSM)}
    assert run_import("lm-eval", list(paths.values()), list(paths), tmp_path / "imported") == 0
    (tmp_path / "native").mkdir()
    for label, path in paths.items():
        native_from_lm_eval(path, label, tmp_path / "native" / f"{label}.jsonl")
    a, b = study_of(tmp_path / "imported"), study_of(tmp_path / "native")
    pa, pb = a.pairs[0], b.pairs[0]
    assert (pa.identical, pa.total, [d.char_index for d in pa.divergences]) == (
        pb.identical,
        pb.total,
        [d.char_index for d in pb.divergences],
    )
    assert repr(quality.quality(a, 0.01).pairs) == repr(quality.quality(b, 0.01).pairs)


# --- Inspect ---------------------------------------------------------------------------------------
def inspect_samples(path: Path, epoch: int) -> dict[str, dict[str, Any]]:
    log = json.loads(path.read_text())
    return {str(s["id"]): s for s in log["samples"] if s["epoch"] == epoch}


def inspect_answer(s: dict[str, Any]) -> str | None:
    return s["scores"]["match"]["answer"] or None


def test_inspect_import_matches_the_log_and_holds_its_control(tmp_path: Path) -> None:
    paths = [inspect_log("stock"), inspect_log("tuned")]
    assert run_import("inspect", paths, ["stock", "tuned"], tmp_path) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stock-1.jsonl", "stock-2.jsonl", "tuned-1.jsonl"]
    study = study_of(tmp_path)
    (control,) = study.controls
    s1, s2 = inspect_samples(paths[0], 1), inspect_samples(paths[0], 2)
    same_text = sum(s1[i]["output"]["completion"] == s2[i]["output"]["completion"] for i in s1)
    assert (control.identical, control.total) == (same_text, len(s1))
    t1 = inspect_samples(paths[1], 1)
    accs = {(a.label, a.repeat): a for a in quality.quality(study, 0.01).accuracies}
    for key, raw in {("stock", 1): s1, ("stock", 2): s2, ("tuned", 1): t1}.items():
        assert accs[key].correct == sum(s["scores"]["match"]["value"] == "C" for s in raw.values())
        assert accs[key].unanswered == sum(inspect_answer(s) is None for s in raw.values())
    q = next(q for q in quality.quality(study, 0.01).pairs if q.kind == "pair")
    assert q.table.b == sum(
        s1[i]["scores"]["match"]["value"] == "C" != t1[i]["scores"]["match"]["value"] for i in s1
    )
    assert q.same_answer == sum(
        inspect_answer(s1[i]) is not None and inspect_answer(s1[i]) == inspect_answer(t1[i]) for i in s1
    )
    log = json.loads(paths[0].read_text())
    mean = log["results"]["scores"][0]["metrics"]["accuracy"]["value"]  # the tool's, over both epochs
    assert (accs[("stock", 1)].correct + accs[("stock", 2)].correct) / (len(s1) + len(s2)) == pytest.approx(
        mean
    )


def test_inspect_header_and_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_import("inspect", [inspect_log("tuned")], ["tuned"], tmp_path / "t.jsonl") == 0
    run: Run = read_run(tmp_path / "t.jsonl")
    source = run.header.extra["imported_from"]
    assert source["tool_version"] == TOOLS["inspect_ai"]
    assert source["scorer"] == "match" and source["scorer_options"] == {"numeric": True}
    assert [s["solver"] for s in source["solver"]] == ["prompt_template", "generate"]
    assert source["prompt_template"].startswith("Solve this math problem.")
    assert run.header.engine["model"] == "openai-api/llamacpp/smollm2"
    urls = [json.loads(inspect_log(n).read_text())["eval"]["model_base_url"] for n in ("stock", "tuned")]
    assert run.header.engine["base_url"] == urls[1] != urls[0]
    capsys.readouterr()
    hot = inspect_log("stock-t08")
    assert run_import("inspect", [inspect_log("stock"), hot], ["stock", "hot"], tmp_path / "h") == 2
    err = capsys.readouterr().err
    assert "different sampling" in err and "(epoch 1)" in err and not (tmp_path / "h").exists()
    # Another prompt template: the samples' inputs are the same, the question asked is not.
    log = json.loads(inspect_log("tuned").read_text())
    log["plan"]["steps"][0]["params"]["template"] = "Answer: {prompt}"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(log))
    assert run_import("inspect", [inspect_log("stock"), other], ["stock", "tuned"], tmp_path / "o") == 2
    assert "different prompt template" in capsys.readouterr().err


def test_inspect_empty_answer_is_no_answer() -> None:
    """``match`` writes an empty answer when the output holds no number (none of the fixture's
    outputs lacks one, so the rule is checked on the scorer's value shape directly)."""
    from servediff.importers.inspect import answer_of
    from servediff.importers.inspect_log import Score

    assert answer_of(Score(value="I", answer="")) is None
    assert answer_of(Score(value="I", answer="  ")) is None
    assert answer_of(Score(value="C", answer="18")) == "18"
    assert answer_of(None) is None
