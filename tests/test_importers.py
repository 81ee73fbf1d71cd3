"""Importing lm-evaluation-harness and Inspect logs: the records must give the same study (identity,
divergences, accuracy, paired changes, survival) as native runs holding the same completions,
and logs that do not pair must be refused before anything is written.

The fixture logs under tests/data follow the writers' field layout: lm-eval's
EvaluationTracker.save_results_samples (samples_<task>_<date>.jsonl + results_<date>.json) and
Inspect's EvalLog (format version 2) with per-token logprobs and two epochs for stock.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from servediff.cli import main
from servediff.compare import quality
from servediff.compare.study import Study, build_study
from servediff.record import read_run
from servediff.report import evidence, scores
from tests.helpers.records import Line, write_run

DATA = Path(__file__).parent / "data"
LM = DATA / "lm_eval"
GSM = {
    "stock": LM / "stock/SmolLM2-135M-Instruct/samples_gsm8k_2026-11-20T10-00-00.000001.jsonl",
    "tuned": LM / "tuned/SmolLM2-135M-Instruct/samples_gsm8k_2026-11-20T11-30-00.000001.jsonl",
}
MMLU = {
    "stock": LM
    / "stock/SmolLM2-135M-Instruct/samples_mmlu_high_school_geography_2026-11-20T10-05-00.000001.jsonl",
    "tuned": LM
    / "tuned/SmolLM2-135M-Instruct/samples_mmlu_high_school_geography_2026-11-20T11-35-00.000001.jsonl",
}
INSPECT = {
    "stock": DATA / "inspect/2026-11-20T10-00-00+00-00_gsm8k_stock.json",
    "tuned": DATA / "inspect/2026-11-20T11-30-00+00-00_gsm8k_tuned.json",
}


def run_import(source: str, paths: list[Path], labels: list[str], out: Path) -> int:
    return main(
        ["import", source, *map(str, paths), *[a for x in labels for a in ("--label", x)], "--out", str(out)]
    )


def study_of(folder: Path) -> Study:
    return build_study([read_run(p) for p in sorted(folder.glob("*.jsonl"))])


def fingerprint(study: Study) -> dict[str, object]:
    """Everything a report states about the study, as comparable values."""
    return {
        "pairs": [
            (
                p.kind,
                p.a,
                p.b,
                p.identical,
                p.total,
                p.errors,
                [(d.item_id, d.char_index, d.token_index) for d in p.divergences],
            )
            for p in [*study.controls, *study.pairs]
        ],
        "accuracy": [(a.label, a.correct, a.n, a.low, a.high) for a in scores.accuracies(study)],
        "paired": [
            (q.a, q.b, q.n, q.a_only, q.b_only, q.p_value, [c.item_id for c in q.changed])
            for q in scores.paired_all(study)
        ],
        "survival": [(s.durations, s.events) for s in evidence.survivals(study.pairs)],
        "quality": repr(
            quality.quality(study)
        ),  # Wilson, McNemar, Newcombe, power: as the reports state them
    }


def native_from_lm_eval(path: Path, label: str, out: Path) -> Path:
    """The same completions and scores as a native run, read straight from the samples JSON."""
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    lines = [
        Line(
            str(r["doc_id"]),
            r["resps"][0][0],
            answer=r["filtered_resps"][0],
            gold=r["target"],
            correct=r["exact_match"] == 1.0,
        )
        for r in rows
        if r["filter"] == "strict-match"
    ]
    return write_run(out, label, lines, suite="lm-eval/gsm8k")


def test_lm_eval_import_gives_the_native_study(tmp_path: Path) -> None:
    assert run_import("lm-eval", [GSM["stock"], GSM["tuned"]], ["stock", "tuned"], tmp_path / "imported") == 0
    native = tmp_path / "native"
    native.mkdir()
    for label, path in GSM.items():
        native_from_lm_eval(path, label, native / f"{label}.jsonl")
    imported = study_of(tmp_path / "imported")
    assert fingerprint(imported) == fingerprint(study_of(native))
    pair = imported.pairs[0]
    assert (pair.identical, pair.total) == (1, 4)
    q = scores.paired(pair)
    assert q is not None and (q.a_only, q.b_only) == (1, 1)  # doc 2 lost, doc 3 gained
    source = read_run(tmp_path / "imported" / "stock-1.jsonl").header.extra["imported_from"]
    assert (
        source["tool_version"] == "0.4.13" and source["format_version"] and source["filter"] == "strict-match"
    )
    assert read_run(tmp_path / "imported" / "stock-1.jsonl").header.suite.version == "3.0"
    # compare, report and export take imported records unchanged.
    files = [str(p) for p in sorted((tmp_path / "imported").glob("*.jsonl"))]
    assert main(["compare", *files]) == 0
    assert main(["report", *files, "--html", str(tmp_path / "r.html")]) == 0
    assert "lm-eval 0.4.13" in (tmp_path / "r.html").read_text()
    assert main(["export", *files, "--csv", str(tmp_path / "r.csv")]) == 0


def test_lm_eval_multiple_choice_takes_the_highest_loglikelihood(tmp_path: Path) -> None:
    assert run_import("lm-eval", [MMLU["stock"], MMLU["tuned"]], ["stock", "tuned"], tmp_path / "mc") == 0
    stock = read_run(tmp_path / "mc" / "stock-1.jsonl")
    tuned = read_run(tmp_path / "mc" / "tuned-1.jsonl")
    assert (stock.items["1"].text, stock.items["1"].answer, stock.items["1"].correct) == (" B", "1", True)
    assert (tuned.items["1"].text, tuned.items["1"].answer, tuned.items["1"].correct) == (" C", "2", False)
    assert tuned.items["1"].metadata["subject"] == "high_school_geography"
    assert tuned.items["1"].metadata["choice_logliks"] == [-1.2, -1.05, -1.0, -2.0]
    study = study_of(tmp_path / "mc")
    assert [d.item_id for d in study.pairs[0].divergences] == ["1"]
    (rows,) = [scores.subject_agreement(p) for p in study.pairs]
    assert [(r.subject, r.n, r.same_answer) for r in rows] == [("high_school_geography", 3, 2)]


def test_lm_eval_refuses_what_does_not_pair(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert run_import("lm-eval", [GSM["stock"], MMLU["tuned"]], ["stock", "tuned"], out) == 2
    assert "different tasks" in capsys.readouterr().err and not out.exists()
    # Same task, but one document edited (its hashes recomputed as lm-eval would).
    rows = [json.loads(x) for x in GSM["tuned"].read_text().splitlines()]
    for r in rows:
        if r["doc_id"] == 2:
            r["doc_hash"] = "0" * 64
    other = tmp_path / GSM["tuned"].name
    other.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert run_import("lm-eval", [GSM["stock"], other], ["stock", "tuned"], out) == 2
    err = capsys.readouterr().err
    assert "different documents" in err and "'2'" in err and not out.exists()
    # A prompt that does not match its recorded hash is refused on its own.
    rows[0]["arguments"]["gen_args_0"]["arg_0"] += " (edited)"
    other.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert run_import("lm-eval", [other], ["tuned"], out / "t.jsonl") == 2
    assert "prompt_hash" in capsys.readouterr().err
    assert run_import("lm-eval", [GSM["stock"]], ["a", "b"], out) == 2  # one label per path
    assert run_import("lm-eval", [INSPECT["stock"]], ["a"], out / "x.jsonl") == 2  # not a samples file


def native_from_inspect(path: Path, label: str, folder: Path) -> list[Path]:
    log = json.loads(path.read_text())
    out = []
    for epoch in sorted({s["epoch"] for s in log["samples"]}):
        lines = []
        for s in (s for s in log["samples"] if s["epoch"] == epoch):
            content = s["output"]["choices"][0]["logprobs"]["content"]
            score = s["scores"]["match"]
            lines.append(
                Line(
                    str(s["id"]),
                    s["output"]["completion"],
                    tokens=[t["token"] for t in content],
                    top=[[(a["token"], a["logprob"]) for a in t["top_logprobs"]] for t in content],
                    answer=score["answer"],
                    gold=s["target"],
                    correct=score["value"] == "C",
                )
            )
        out.append(
            write_run(
                folder / f"{label}-{epoch}.jsonl",
                label,
                lines,
                repeat=epoch,
                top_logprobs=2,
                suite="inspect/gsm8k",
            )
        )
    return out


def test_inspect_import_gives_the_native_study(tmp_path: Path) -> None:
    assert (
        run_import("inspect", [INSPECT["stock"], INSPECT["tuned"]], ["stock", "tuned"], tmp_path / "imported")
        == 0
    )
    assert sorted(p.name for p in (tmp_path / "imported").iterdir()) == [
        "stock-1.jsonl",
        "stock-2.jsonl",
        "tuned-1.jsonl",
    ]
    native = tmp_path / "native"
    native.mkdir()
    for label, path in INSPECT.items():
        native_from_inspect(path, label, native)
    imported = study_of(tmp_path / "imported")
    assert fingerprint(imported) == fingerprint(study_of(native))
    (control,) = imported.controls  # the second epoch is the control
    assert (control.identical, control.total) == (4, 4)
    views = evidence.views(imported.pairs[0])
    assert all(v.gap is not None and v.gap == pytest.approx(0.14) for v in views)  # runner-up flips
    source = read_run(tmp_path / "imported" / "tuned-1.jsonl").header.extra["imported_from"]
    assert (source["format_version"], source["tool_version"], source["scorer"]) == (2, "0.3.285", "match")


def test_inspect_errored_sample_is_left_out_not_wrong(tmp_path: Path) -> None:
    log = json.loads(INSPECT["tuned"].read_text())
    log["samples"][1]["error"] = {"message": "RateLimitError: 429", "traceback": "", "traceback_ansi": ""}
    broken = tmp_path / "tuned.json"
    broken.write_text(json.dumps(log))
    assert run_import("inspect", [INSPECT["stock"], broken], ["stock", "tuned"], tmp_path / "r") == 0
    tuned = read_run(tmp_path / "r" / "tuned-1.jsonl")
    assert tuned.items["2"].error == "RateLimitError: 429" and tuned.items["2"].correct is None
    study = study_of(tmp_path / "r")
    assert study.pairs[0].errors == 1
    q = scores.paired(study.pairs[0])
    assert q is not None and q.n == 3


def test_inspect_refuses_other_documents_and_unknown_eval_logs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = json.loads(INSPECT["tuned"].read_text())
    log["samples"][0]["input"] = "A different question."
    other = tmp_path / "other.json"
    other.write_text(json.dumps(log))
    assert run_import("inspect", [INSPECT["stock"], other], ["stock", "tuned"], tmp_path / "o") == 2
    assert "different documents" in capsys.readouterr().err
    if importlib.util.find_spec("inspect_ai") is None:
        packed = tmp_path / "log.eval"
        shutil.copy(INSPECT["tuned"], packed)
        assert run_import("inspect", [packed], ["tuned"], tmp_path / "e.jsonl") == 2
        assert "inspect_ai" in capsys.readouterr().err
