"""Bad input at every boundary: one line that says what is wrong (and where), exit 2, no
traceback, and no file written or changed.

Each case is a command line, the files it reads (written fresh into a folder of its own), and a
fragment of the message. A case passes only if the command exits 2 with exactly one line on
stderr containing the fragment and no traceback, and every file in its folder is byte for byte
what it was (nothing new either: a bad value must be refused before a record is started).
Runs point at a port nobody listens on: the input must be refused before any engine is asked.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from servediff.cli import main
from tests.helpers.records import Line, write_run

ROOT = Path(__file__).resolve().parents[1]
NOBODY = "http://127.0.0.1:9"  # the discard port: refused at once if anything tried to connect
GOOD_ITEM = {"id": "a", "prompt": "Say hi."}


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]  # "{d}" is the case's folder
    message: str  # a fragment of the one line on stderr ("{d}" as in argv)
    files: dict[str, str | bytes] = field(default_factory=dict)
    records: bool = False  # also write two valid run records, {d}/a.jsonl and {d}/b.jsonl
    schema: int | None = None  # with records: a.jsonl's header says this schema_version
    subprocess: bool = False  # run as `python -m servediff` rather than in-process


def suite(bad: object | bytes) -> dict[str, str | bytes]:
    """A three-item suite whose second line is ``bad`` (a JSON value, or raw bytes)."""
    line = bad if isinstance(bad, bytes) else json.dumps(bad).encode()
    good = [json.dumps({**GOOD_ITEM, "id": i}).encode() for i in ("a", "c")]
    return {"suite.jsonl": good[0] + b"\n" + line + b"\n" + good[1] + b"\n"}


RUN = ("run", "--engine", "http", "--base-url", NOBODY, "--retries", "0", "--timeout", "5",
       "--max-tokens", "4", "--label", "x", "--out", "{d}/out.jsonl", "--no-progress")  # fmt: skip
GOOD_SUITE = suite({"id": "b", "prompt": "Say bye."})


def run_case(id: str, *extra: str, message: str) -> Case:
    """`run` on a good suite with one bad option (a later option wins in argparse)."""
    return Case(id, (*RUN, "--suite", "{d}/suite.jsonl", *extra), message, GOOD_SUITE)


def score_case(id: str, *extra: str, message: str) -> Case:
    """`run --score` on a file of texts, with an option scoring would ignore."""
    return Case(id, (*RUN, "--score", "{d}/texts.txt", *extra), message, {"texts.txt": "One text.\n"})


def suite_case(id: str, bad: object | bytes, message: str, **kw: bool) -> Case:
    return Case(id, (*RUN, "--suite", "{d}/suite.jsonl"), message, suite(bad), **kw)


def data_case(id: str, name: str, lines: bytes, message: str, **kw: bool) -> Case:
    argv = (*RUN, "--suite", name, "--data", "{d}/data.jsonl")
    return Case(id, argv, message, {"data.jsonl": lines}, **kw)


GSM8K_ROW = json.dumps({"question": "1+1?", "answer": "2\n#### 2"}).encode() + b"\n"
MMLU_ROW = {"question": "q", "answer_a": "1", "answer_b": "2", "answer_c": "3", "answer_d": "4",
            "correct_answer": "A", "topic": "maths"}  # fmt: skip
MMLU_LINE = json.dumps(MMLU_ROW).encode() + b"\n"
LM_EVAL_LOG = next((ROOT / "tests/data/importers/lm_eval/chat-stock").rglob("samples_gsm8k_*.jsonl"))
DEEP = b'{"id": "deep", "prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"


def configs_case(id: str, text: str | bytes, message: str) -> Case:
    return Case(id, ("configs", "--config-file", "{d}/knobs.toml"), message, {"knobs.toml": text})


def experiment(top: str = "", sampling: str = "", suites: str = "", config: str = "") -> str:
    """A valid experiment file, with lines added to its top, [sampling], [suites.prompts] and
    first configuration."""
    launch = 'launch = ["python3", "-m", "some.server", "--port", "{port}"]\n'
    return (
        f'model = "m"\n{top}\n[sampling]\n{sampling}\n'
        f"[suites.prompts]\n{suites}\n[probes]\nenabled = false\n\n"
        f'[[configurations]]\nlabel = "a"\n{launch}{config}\n'
        f'[[configurations]]\nlabel = "b"\n{launch}'
    )


def exp_case(id: str, message: str, text: str | bytes | None = None, **parts: str) -> Case:
    body = text if text is not None else experiment(**parts)
    return Case(id, ("experiment", "{d}/study.toml", "--check"), message, {"study.toml": body})


def stats_case(id: str, *argv: str, message: str, **kw: bool) -> Case:
    return Case(id, ("stats", *argv), message, **kw)


# fmt: off
CASES: list[Case] = [
    # --- stats: ranges of counts and probabilities -------------------------------------------
    stats_case("ci-n-0", "ci", "--correct", "0", "--n", "0", message="--n: must be an integer >= 1",
               subprocess=True),
    stats_case("mcnemar-b-negative", "mcnemar", "--b", "-1", "--c", "3", message="--b: must be an"),
    stats_case("mcnemar-c-negative", "mcnemar", "--b", "2", "--c", "-4", message="--c: must be"),
    stats_case("mcnemar-n-alone", "mcnemar", "--b", "1", "--c", "1", "--n", "10",
               message="give --n and --a-correct together"),
    stats_case("mcnemar-a-correct-alone", "mcnemar", "--b", "1", "--c", "1", "--a-correct", "5",
               message="give --n and --a-correct together"),
    stats_case("mcnemar-margin-0", "mcnemar", "--b", "1", "--c", "1", "--n", "10", "--a-correct", "5",
               "--margin", "0", message="--margin: must be between 0 and 1"),
    stats_case("mcnemar-margin-nan", "mcnemar", "--b", "1", "--c", "1", "--n", "10", "--a-correct", "5",
               "--margin", "nan", message="--margin: must be a finite number"),
    stats_case("power-alpha-0", "power", "--delta", "0.02", "--discordance", "0.1", "--alpha", "0",
               message="--alpha: must be between 0 and 1", subprocess=True),
    stats_case("power-alpha-2", "power", "--delta", "0.02", "--discordance", "0.1", "--alpha", "2",
               message="--alpha: must be between 0 and 1"),
    stats_case("power-power-1", "power", "--delta", "0.02", "--discordance", "0.1", "--power", "1",
               message="--power: must be between 0 and 1"),
    stats_case("power-delta-0", "power", "--delta", "0", "--discordance", "0.1", message="--delta: must be"),
    stats_case("power-delta-negative", "power", "--delta", "-0.1", "--discordance", "0.1",
               message="--delta: must be"),
    stats_case("power-delta-nan", "power", "--delta", "nan", "--discordance", "0.1",
               message="--delta: must be a finite number"),
    stats_case("power-discordance-above-1", "power", "--delta", "0.02", "--discordance", "1.5",
               message="--discordance: must be from 0 to 1"),
    stats_case("power-discordance-negative", "power", "--delta", "0.02", "--discordance", "-0.2",
               message="--discordance: must be from 0 to 1"),
    stats_case("power-p-above-1", "power", "--delta", "0.02", "--discordance", "0.1", "--p", "1.2",
               message="--p: must be from 0 to 1"),
    # --- compare, report, export: thresholds and where the output goes ------------------------
    Case("compare-near-tie-negative", ("compare", "{d}/a.jsonl", "{d}/b.jsonl", "--near-tie", "-1"),
         "--near-tie: must be >= 0", records=True),
    Case("compare-near-tie-nan", ("compare", "{d}/a.jsonl", "{d}/b.jsonl", "--near-tie", "nan"),
         "--near-tie: must be a finite number", records=True),
    Case("compare-near-tie-inf", ("compare", "{d}/a.jsonl", "{d}/b.jsonl", "--near-tie", "inf"),
         "--near-tie: must be a finite number", records=True),
    Case("compare-schema-version-0", ("compare", "{d}/a.jsonl", "{d}/b.jsonl"),
         "{d}/a.jsonl:1: bad header: schema_version must be from 1 to 3, not 0", records=True, schema=0),
    Case("report-schema-version-negative", ("report", "{d}/a.jsonl", "{d}/b.jsonl"),
         "{d}/a.jsonl:1: bad header: schema_version must be from 1 to 3, not -1", records=True, schema=-1),
    Case("compare-md-is-a-folder", ("compare", "{d}/a.jsonl", "{d}/b.jsonl", "--md", "{d}"),
         "is a folder, not a file", records=True),
    Case("report-near-tie-negative", ("report", "{d}/a.jsonl", "{d}/b.jsonl", "--near-tie", "-0.5"),
         "--near-tie: must be >= 0", records=True),
    Case("report-md-under-a-file", ("report", "{d}/a.jsonl", "{d}/b.jsonl", "--md", "{d}/a.jsonl/r.md"),
         "{d}/a.jsonl is a file, so", records=True),
    Case("report-html-is-a-folder", ("report", "{d}/a.jsonl", "{d}/b.jsonl", "--html", "{d}"),
         "is a folder, not a file", records=True),
    Case("export-csv-is-a-folder", ("export", "{d}/a.jsonl", "{d}/b.jsonl", "--csv", "{d}"),
         "--csv: {d} is a folder", records=True, subprocess=True),
    Case("export-csv-under-a-file", ("export", "{d}/a.jsonl", "{d}/b.jsonl", "--csv", "{d}/a.jsonl/t.csv"),
         "{d}/a.jsonl is a file, so", records=True),
    Case("export-parquet-is-a-folder", ("export", "{d}/a.jsonl", "{d}/b.jsonl", "--parquet", "{d}"),
         "--parquet: {d} is a folder", records=True),
    Case("probe-k-1", ("probe", "{d}/a.jsonl", "{d}/b.jsonl", "--out", "{d}/p.jsonl", "--k", "1",
                       "--base-url-a", NOBODY, "--base-url-b", NOBODY),
         "--k: must be an integer from 2 to 20", records=True),
    Case("probe-k-21", ("probe", "{d}/a.jsonl", "{d}/b.jsonl", "--out", "{d}/p.jsonl", "--k", "21",
                        "--base-url-a", NOBODY, "--base-url-b", NOBODY),
         "--k: must be an integer from 2 to 20", records=True),
    Case("import-out-under-a-file", ("import", "lm-eval", "{d}/log.jsonl", "--label", "x",
                                     "--out", "{d}/log.jsonl/x.jsonl"),
         "{d}/log.jsonl is a file, so", {"log.jsonl": LM_EVAL_LOG.read_bytes()}),
    # --- run: every numeric option, and the record path ---------------------------------------
    run_case("run-limit-0", "--limit", "0", message="--limit: must be an integer >= 1"),
    Case("run-humaneval-without-permission", (*RUN, "--suite", "humaneval"),
         "pass --allow-code-execution (in an experiment file: allow_code_execution = true) to allow it"),
    Case("humaneval-row-without-test",
         (*RUN, "--suite", "humaneval", "--allow-code-execution", "--data", "{d}/data.jsonl"),
         "data.jsonl:1: not a HumanEval problem: KeyError('test')",
         {"data.jsonl": b'{"task_id": "t", "prompt": "def f():"}\n'}),
    run_case("run-limit-negative", "--limit", "-1", message="--limit: must be an integer >= 1"),
    run_case("run-concurrency-0", "--concurrency", "0", message="--concurrency: must be an integer from 1"),
    run_case("run-max-tokens-negative", "--max-tokens", "-1", message="--max-tokens: must be"),
    run_case("run-max-tokens-0", "--max-tokens", "0", message="--max-tokens: must be an integer >= 1"),
    run_case("run-repeat-0", "--repeat", "0", message="--repeat: must be an integer >= 1"),
    run_case("run-top-logprobs-negative", "--top-logprobs", "-2", message="--top-logprobs: must be"),
    run_case("run-timeout-negative", "--timeout", "-1", message="--timeout: must be > 0"),
    run_case("run-timeout-nan", "--timeout", "nan", message="--timeout: must be a finite number"),
    run_case("run-retries-negative", "--retries", "-1", message="--retries: must be an integer >= 0"),
    run_case("run-seed-negative", "--seed", "-1", message="--seed: must be an integer from 0 to 4294967295"),
    run_case("run-subsample-seed-negative", "--subsample-seed", "-1", message="--subsample-seed: must be"),
    run_case("run-n-batch-0", "--n-batch", "0", message="--n-batch: must be an integer >= 1"),
    run_case("run-threads-negative", "--threads", "-1", message="--threads: must be an integer from 0"),
    run_case("run-prompt-lookup-negative", "--prompt-lookup", "-1", message="--prompt-lookup: must be"),
    run_case("run-batch-size-0", "--batch-size", "0", message="--batch-size: must be an integer >= 1"),
    run_case("run-out-under-a-file", "--out", "{d}/suite.jsonl/out.jsonl", message="{d}/suite.jsonl is a"),
    run_case("run-out-is-a-folder", "--out", "{d}", message="--out: {d} is a folder"),
    run_case("run-samples-a-billion", "--temperature", "0.7", "--samples", "1000000000",
             message="--samples: must be an integer from 1 to 1000, got '1000000000'"),
    # --- run: options that would be accepted and then ignored ----------------------------------
    score_case("run-score-with-suite", "--suite", "gsm8k", message="--score and --suite do not go together"),
    score_case("run-score-with-temperature", "--temperature", "0.7",
               message="--score and --temperature do not go together"),
    score_case("run-score-with-temperature-0", "--temperature", "0",
               message="--score and --temperature do not go together"),
    score_case("run-score-with-samples", "--samples", "2",
               message="--score and --samples do not go together"),
    score_case("run-score-with-top-p", "--top-p", "0.9", message="--score and --top-p do not go together"),
    score_case("run-score-with-top-k", "--top-k", "5", message="--score and --top-k do not go together"),
    run_case("run-score-api-without-score", "--score-api", "vllm", message="--score-api needs --score"),
    run_case("run-score-api-default-without-score", "--score-api", "llama-cpp-python",
             message="--score-api needs --score"),
    run_case("run-bos-text-without-score", "--bos-text", "<s>", message="--bos-text needs --score"),
    # --- suite lines: what would be sent as something else ------------------------------------
    suite_case("suite-prompt-int", {"id": "b", "prompt": 5}, "suite.jsonl:2: item 'b': 'prompt' must be"),
    suite_case("suite-prompt-list", {"id": "b", "prompt": ["x", "y"]}, "suite.jsonl:2: item 'b': 'prompt'"),
    suite_case("suite-prompt-dict", {"id": "b", "prompt": {"t": 1}}, "suite.jsonl:2: item 'b': 'prompt'"),
    suite_case("suite-prompt-bool", {"id": "b", "prompt": True}, "suite.jsonl:2: item 'b': 'prompt'"),
    suite_case("suite-prompt-empty", {"id": "b", "prompt": ""}, "suite.jsonl:2: item 'b': 'prompt'"),
    suite_case("suite-messages-empty", {"id": "b", "messages": []}, "suite.jsonl:2: item 'b': 'messages'"),
    suite_case("suite-content-int", {"id": "b", "messages": [{"role": "user", "content": 7}]},
               "suite.jsonl:2: item 'b' message 1: 'content' must be a string"),
    suite_case("suite-content-missing", {"id": "b", "messages": [{"role": "user"}]},
               "suite.jsonl:2: item 'b' message 1: 'content'"),
    suite_case("suite-role-missing", {"id": "b", "messages": [{"content": "hi"}]},
               "suite.jsonl:2: item 'b' message 1: 'role' must be one of"),
    suite_case("suite-role-unknown", {"id": "b", "messages": [{"role": "usr", "content": "hi"}]},
               "suite.jsonl:2: item 'b' message 1: 'role'"),
    suite_case("suite-message-extra-not-string", {"id": "b", "messages": [
        {"role": "user", "content": "hi", "name": 3}]}, "suite.jsonl:2: item 'b' message 1: 'name'"),
    suite_case("suite-target-word", {"id": "b", "prompt": "x", "target": "seven"},
               "suite.jsonl:2: item 'b': 'target' must be a number"),
    suite_case("suite-target-bool", {"id": "b", "prompt": "x", "target": True},
               "suite.jsonl:2: item 'b': 'target' must be a number"),
    suite_case("suite-target-on-one-line", {"id": "b", "prompt": "x", "target": 7},
               "suite.jsonl:2: give a 'target' on every line or on none"),
    suite_case("suite-id-null", {"id": None, "prompt": "x"}, "suite.jsonl:2: 'id' must be"),
    suite_case("suite-id-dict", {"id": {"n": 1}, "prompt": "x"}, "suite.jsonl:2: 'id' must be"),
    suite_case("suite-id-list", {"id": [1], "prompt": "x"}, "suite.jsonl:2: 'id' must be"),
    suite_case("suite-id-bool", {"id": True, "prompt": "x"}, "suite.jsonl:2: 'id' must be"),
    suite_case("suite-id-float", {"id": 1.5, "prompt": "x"}, "suite.jsonl:2: 'id' must be"),
    suite_case("suite-id-empty", {"id": "", "prompt": "x"}, "suite.jsonl:2: 'id' must be"),
    suite_case("suite-deep-nesting", DEEP, "suite.jsonl:2: nested too deeply", subprocess=True),
    suite_case("suite-not-utf8", b'{"id": "b", "prompt": "caf\xe9"}', "suite.jsonl:2: not UTF-8 (byte 0xe9"),
    suite_case("suite-lone-surrogate-prompt", b'{"id": "b", "prompt": "x\\ud800y"}',
               "suite.jsonl:2: a lone surrogate"),
    suite_case("suite-lone-surrogate-id", b'{"id": "\\udfff", "prompt": "x"}', "suite.jsonl:2: a lone"),
    suite_case("suite-lone-surrogate-content",
               b'{"id": "b", "messages": [{"role": "user", "content": "\\ud83d"}]}',
               "suite.jsonl:2: a lone surrogate"),
    data_case("gsm8k-not-utf8", "gsm8k", GSM8K_ROW + b'{"question": "\xff", "answer": "#### 1"}\n',
              "data.jsonl:2: not UTF-8"),
    data_case("gsm8k-deep-nesting", "gsm8k", GSM8K_ROW + DEEP + b"\n", "data.jsonl:2: nested too deeply"),
    data_case("gsm8k-lone-surrogate", "gsm8k", GSM8K_ROW + b'{"question": "\\ud800", "answer": "#### 1"}\n',
              "data.jsonl:2: a lone surrogate"),
    data_case("mmlu-lone-surrogate", "mmlu",
              MMLU_LINE + MMLU_LINE.replace(b'"q"', b'"\\udc00"'),
              "data.jsonl:2: a lone surrogate"),
    # --- configuration files -----------------------------------------------------------------
    configs_case("configs-value-not-table", "[configs]\nx = 5\n", "configs.x must be a [configs.x] table"),
    configs_case("configs-not-tables", "configs = 5\n", "'configs' must hold [configs.NAME] tables"),
    configs_case("configs-knob-float", "[configs.a]\nn_batch = 1.5\n", "n_batch must be int, not 1.5"),
    configs_case("configs-knob-bool-for-int", "[configs.a]\nn_batch = true\n", "n_batch must be int"),
    configs_case("configs-knob-int-for-bool", "[configs.a]\nflash_attn = 1\n", "flash_attn must be bool"),
    configs_case("configs-not-utf8", b'[configs.a]\n# caf\xe9\nn_batch = 8\n', "knobs.toml:2: not UTF-8"),
    # --- experiment files --------------------------------------------------------------------
    exp_case("exp-code-execution-string", "study.toml:6: allow_code_execution must be true or false",
             suites='allow_code_execution = "yes"'),
    exp_case("exp-output-int", "study.toml:2: output has the wrong type (int)", top="output = 5"),
    exp_case("exp-model-path-int", "study.toml:2: model_path has the wrong type", top="model_path = 5"),
    exp_case("exp-title-int", "study.toml:2: title has the wrong type", top="title = 5"),
    exp_case("exp-suite-path-int", "path has the wrong type", suites="[suites.mine]\npath = 5"),
    exp_case("exp-port-70000", "port must be an integer from 1 to 65535, got 70000", config="port = 70000"),
    exp_case("exp-port-0", "port must be an integer from 1 to 65535", config="port = 0"),
    exp_case("exp-port-float", "port has the wrong type (float)", config="port = 8000.5"),
    exp_case("exp-start-timeout-negative", "start_timeout must be a number of seconds > 0",
             config="start_timeout = -1"),
    exp_case("exp-stop-timeout-nan", "stop_timeout must be a number of seconds", config="stop_timeout = nan"),
    exp_case("exp-health-int", "health has the wrong type", config="health = 5"),
    exp_case("exp-base-url-int", "base_url has the wrong type",
             text='model = "m"\n[[configurations]]\nlabel = "a"\nbase_url = 5\n'),
    exp_case("exp-profile-list", "profile has the wrong type", config='profile = ["vllm"]'),
    exp_case("exp-max-tokens-0", "max_tokens must be an integer >= 1", sampling="max_tokens = 0"),
    exp_case("exp-max-tokens-negative", "max_tokens must be an integer >= 1", sampling="max_tokens = -5"),
    exp_case("exp-seed-negative", "seed must be an integer >= 0", sampling="seed = -1"),
    exp_case("exp-top-logprobs-negative", "top_logprobs must be an integer", sampling="top_logprobs = -2"),
    exp_case("exp-samples-a-billion", "samples must be an integer from 1 to 1000, got 1000000000",
             sampling="temperature = 0.7\nsamples = 1000000000"),
    exp_case("exp-suite-limit-0", "limit must be an integer >= 1", suites="limit = 0"),
    exp_case("exp-suite-limit-negative", "limit must be an integer >= 1", suites="limit = -1"),
    exp_case("exp-suite-seed-negative", "seed must be an integer >= 0", suites="seed = -3"),
    exp_case("exp-suite-max-tokens-0", "max_tokens must be an integer >= 1", suites="max_tokens = 0"),
    exp_case("exp-not-utf8", "study.toml:2: not UTF-8 (byte 0xff", text=b'model = "m"\n# \xff\n'),
    Case("exp-out-under-a-file", ("experiment", "{d}/study.toml", "--check", "--out", "{d}/study.toml/o"),
         "{d}/study.toml is a file, so", {"study.toml": experiment()}),
    Case("exp-out-is-a-file", ("experiment", "{d}/study.toml", "--check", "--out", "{d}/study.toml"),
         "--out: {d}/study.toml is a file, not a folder", {"study.toml": experiment()}),
    Case("exp-bisect-without-factors", ("experiment", "{d}/study.toml", "--bisect", "--out", "{d}/o"),
         "{d}/study.toml: --bisect needs [[factors]]", {"study.toml": experiment()}),
    # --- demo: its numeric options (a missing model: nothing would run on the old code either) --
    Case("demo-limit-0", ("demo", "--limit", "0", "--out", "{d}/o", "--model-path", "{d}/none.gguf"),
         "--limit: must be an integer >= 1"),
    Case("demo-max-tokens-0", ("demo", "--max-tokens", "0", "--out", "{d}/o", "--model-path", "{d}/no.gguf"),
         "--max-tokens: must be an integer >= 1"),
    Case("demo-mmlu-limit-negative", ("demo", "--mmlu-limit", "-1", "--out", "{d}/o", "--model-path",
                                      "{d}/none.gguf"), "--mmlu-limit: must be an integer >= 0"),
    Case("demo-out-is-a-file", ("demo", "--out", "{d}/f", "--model-path", "{d}/none.gguf"),
         "--out: {d}/f is a file, not a folder", {"f": "x"}),
]
# fmt: on


def _snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _prepare(case: Case, d: Path) -> list[str]:
    for name, content in case.files.items():
        (d / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    if case.records:
        write_run(d / "a.jsonl", "stock", [Line("q1", "The sky is blue.")])
        write_run(d / "b.jsonl", "tuned", [Line("q1", "The sky is grey.")])
        if case.schema is not None:
            head, *rest = (d / "a.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
            head = json.dumps({**json.loads(head), "schema_version": case.schema}) + "\n"
            (d / "a.jsonl").write_text("".join([head, *rest]), encoding="utf-8")
    return [a.replace("{d}", str(d)) for a in case.argv]


def _in_process(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 2
    return code, err.getvalue()


def _subprocess(argv: list[str]) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-m", "servediff", *argv], capture_output=True, text=True, env=env, timeout=120
    )
    return done.returncode, done.stderr


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_exit_2_and_touches_nothing(case: Case, tmp_path: Path) -> None:
    d = tmp_path / "case"
    d.mkdir()
    argv = _prepare(case, d)
    before = _snapshot(d)
    code, err = (_subprocess if case.subprocess else _in_process)(argv)
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert case.message.replace("{d}", str(d)) in lines[0]
    assert code == 2
    assert _snapshot(d) == before


def test_the_campaign_covers_every_boundary() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 60
    commands = {c.argv[0] for c in CASES}
    assert commands >= {"stats", "compare", "report", "export", "probe", "import", "run", "configs",
                        "experiment", "demo"}  # fmt: skip


def test_good_suite_lines_still_load(tmp_path: Path) -> None:
    """The checks refuse what is wrong, not what is unusual: integer ids, a system message,
    extra string keys in a message, a valid surrogate pair (an emoji), blank lines."""
    from servediff.suites.prompts import from_jsonl

    path = tmp_path / "ok.jsonl"
    rows = [
        {"id": 1, "prompt": "x \ud83d\ude00"},
        {"id": "chat", "messages": [{"role": "system", "content": ""}, {"role": "user", "content": "hi",
                                                                        "name": "u"}]},
    ]  # fmt: skip
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    suite = from_jsonl(path)
    assert [s.id for s in suite.samples] == ["1", "chat"]
    assert suite.samples[0].prompt == "x \U0001f600"
    assert suite.samples[1].messages is not None and suite.samples[1].messages[1]["name"] == "u"
