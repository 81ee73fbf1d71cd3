"""Read an Inspect evaluation log (``EvalLog``) into a servediff run.

    servediff import inspect logs/2026-01-01T12-00-00_gsm8k_abc.json --label stock --out a.jsonl

A ``.json`` log is read directly: ``version`` (the log format, 2 today), ``status``, ``eval``
(task, task_version, model, model_generate_config, dataset, packages), and ``samples``, each an
``EvalSample``: ``id``, ``epoch``, ``input``, ``target``, ``output`` (``completion`` and
``choices[0]`` with ``stop_reason`` and, when requested, per-token ``logprobs``), ``scores``
(scorer name → ``{value, answer, explanation}``; value ``"C"``/``"I"`` or 1/0 is right/wrong) and
``error``. A ``.eval`` log (a zip) is read through ``inspect_ai.log.read_eval_log`` when
inspect_ai is installed. Items pair across runs by sample id, input, target and choices; runs
pair only when their solver chain (prompt template included) and sampling agree. Each epoch
becomes one run, numbered as a repeat (``--epoch`` picks one), so a log with two epochs at
temperature 0 holds its own control.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servediff.importers.imported import (
    PAIR_KEY,
    Imported,
    ImportOptions,
    LogImportError,
    correctness,
    file_sha256,
    header,
    read_text,
    sha256_json,
    suite_info,
)
from servediff.record import Item, SamplingInfo, sha256_text

FORMAT = "inspect EvalLog"
KNOWN_VERSIONS = (1, 2)


def load(path: Path) -> dict[str, Any]:
    if path.suffix == ".eval":
        try:
            from inspect_ai.log import read_eval_log
        except ImportError as exc:
            raise LogImportError(
                f"{path}: a .eval log needs inspect_ai installed (pip install inspect-ai), or convert "
                "it with `inspect log convert --to json`"
            ) from exc
        data: Any = read_eval_log(str(path)).model_dump(mode="json")
    else:
        try:
            data = json.loads(read_text(path))
        except json.JSONDecodeError as exc:
            raise LogImportError(f"{path}: cannot read an Inspect log (not JSON: {exc})") from exc
    if not isinstance(data, dict) or "eval" not in data or "version" not in data:
        raise LogImportError(f"{path}: not an Inspect eval log (no version/eval fields)")
    if data["version"] not in KNOWN_VERSIONS:
        raise LogImportError(
            f"{path}: Inspect log format version {data['version']} is not one of {KNOWN_VERSIONS}"
        )
    return data


def text_of(content: Any) -> str:
    """A message's content: a string, or a list of content parts of which the text ones count."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def plain_input(value: Any) -> Any:
    if isinstance(value, list):
        return [
            {"role": m.get("role"), "content": text_of(m.get("content"))}
            for m in value
            if isinstance(m, dict)
        ]
    return value


def token_data(choice: dict[str, Any]) -> tuple[list[str] | None, list[Any] | None]:
    content = (choice.get("logprobs") or {}).get("content")
    if not content:
        return None, None
    tokens = [str(t["token"]) for t in content]
    logprobs = [
        [
            str(t["token"]),
            float(t["logprob"]),
            [[str(a["token"]), float(a["logprob"])] for a in t.get("top_logprobs") or []],
        ]
        for t in content
    ]
    return tokens, logprobs


def score_of(sample: dict[str, Any], scorer: str | None) -> tuple[str | None, dict[str, Any] | None]:
    scores = sample.get("scores") or {}
    if not scores:
        return None, None
    name = scorer or next(iter(scores))
    if name not in scores:
        raise LogImportError(f"sample {sample.get('id')}: no scorer {name!r}; it has {sorted(scores)}")
    return name, scores[name]


def answer_of(score: dict[str, Any] | None) -> str | None:
    """The scorer's extracted answer; ``match`` records an empty one when it found none."""
    answer = None if score is None else score.get("answer")
    return None if answer is None or not str(answer).strip() else str(answer)


def item(sample: dict[str, Any], scorer: str | None) -> Item:
    output = sample.get("output") or {}
    choice = (output.get("choices") or [{}])[0]
    text = output.get("completion") or text_of((choice.get("message") or {}).get("content"))
    tokens, logprobs = token_data(choice)
    error = sample.get("error")
    _, score = score_of(sample, scorer)
    target = sample.get("target")
    gold = " | ".join(map(str, target)) if isinstance(target, list) else target
    usage = output.get("usage") or {}
    meta = {k: v for k, v in (sample.get("metadata") or {}).items() if isinstance(v, (str, int, float, bool))}
    meta[PAIR_KEY] = sha256_json([plain_input(sample.get("input")), target, sample.get("choices")])
    meta["epoch"] = sample.get("epoch", 1)
    return Item(
        id=str(sample["id"]),
        input=plain_input(sample.get("input")),
        text=str(text),
        sha256=sha256_text(str(text)),
        n_tokens=usage.get("output_tokens") or (len(tokens) if tokens else None),
        finish_reason=choice.get("stop_reason"),
        latency_s=float(output.get("time") or 0.0),
        error=(error.get("message") or "error")
        if isinstance(error, dict)
        else (str(error) if error else None),
        tokens=tokens,
        token_source="engine" if tokens else None,
        logprobs=logprobs,
        answer=answer_of(score),
        gold=None if gold is None else str(gold),
        correct=None if score is None or error else correctness(score.get("value")),
        metadata=meta,
    )


def sampling(spec: dict[str, Any], plan: dict[str, Any]) -> tuple[SamplingInfo, list[str]]:
    cfg = {
        **(plan.get("config") or {}),
        **{k: v for k, v in (spec.get("model_generate_config") or {}).items() if v is not None},
    }
    notes = (
        []
        if cfg.get("temperature") is not None
        else ["temperature not set in the log: the provider default applied"]
    )
    return SamplingInfo(
        temperature=float(cfg.get("temperature") or 0.0),
        seed=int(cfg.get("seed") or 0),
        max_tokens=int(cfg.get("max_tokens") or 0),
        top_logprobs=int(cfg.get("top_logprobs") or 0),
        enable_thinking=None,
    ), notes


def read(path: Path, o: ImportOptions) -> list[Imported]:
    """One run per epoch (or only ``o.epoch``): at temperature 0 a second epoch is the control."""
    log = load(path)
    epochs = sorted({int(s.get("epoch", 1)) for s in log.get("samples") or []})
    if o.epoch is not None and o.epoch not in epochs:
        raise LogImportError(f"{path}: no samples for epoch {o.epoch}; it has epochs {epochs}")
    return [read_epoch(path, log, o, e) for e in ([o.epoch] if o.epoch is not None else epochs)]


def solver_of(plan: dict[str, Any]) -> tuple[list[Any], str | None]:
    """The solver chain (each step's name and parameters) and its prompt template, if any: two
    runs that asked the model differently are not one comparison, whatever their samples say."""
    steps: list[dict[str, Any]] = []
    templates: list[str] = []
    for st in plan.get("steps") or []:
        params = st.get("params") or {} if isinstance(st, dict) else {}
        if isinstance(st, dict):
            steps.append({"solver": st.get("solver"), "params": params})
        if isinstance(params, dict) and "template" in params:
            templates.append(str(params["template"]))
    return steps, (templates[0] if templates else None)


def engine_of(spec: dict[str, Any], o: ImportOptions) -> dict[str, Any]:
    generate = {k: v for k, v in (spec.get("model_generate_config") or {}).items() if v is not None}
    return {
        "kind": "inspect",
        "model": o.model or spec.get("model"),
        "base_url": spec.get("model_base_url"),
        "options": {"model_args": spec.get("model_args") or {}, "generation": generate},
    }


def read_epoch(path: Path, log: dict[str, Any], o: ImportOptions, epoch: int) -> Imported:
    spec = log["eval"]
    samples = [s for s in log.get("samples") or [] if int(s.get("epoch", 1)) == epoch]
    scorer, _ = score_of(samples[0], o.choose)
    items = [item(s, scorer) for s in samples]
    plan = log.get("plan") or {}
    steps, template = solver_of(plan)
    source = {
        "format": FORMAT,
        "format_version": log["version"],
        "tool": "inspect_ai",
        "tool_version": (spec.get("packages") or {}).get("inspect_ai"),
        "status": log.get("status"),
        "file": path.name,
        "file_sha256": file_sha256(path),
        "task": spec.get("task"),
        "scorer": scorer,
        "scorer_options": next(
            (sc.get("options") for sc in spec.get("scorers") or [] if sc.get("name") == scorer), None
        ),
        "solver": steps,
        "prompt_template": template,
        "epoch": epoch,
        "epochs": (spec.get("config") or {}).get("epochs"),
    }
    dataset = spec.get("dataset") or {}
    suite = suite_info(
        f"inspect/{spec.get('task')}",
        str(spec.get("task_version", 0)),
        str(dataset.get("name") or dataset.get("location") or path.name),
        items,
    )
    info, notes = sampling(spec, plan)
    if log.get("status") != "success":
        notes.append(f"the log's status is {log.get('status')!r}: samples may be missing")
    created = str(spec.get("created") or "")
    return Imported(header(o, engine_of(spec, o), info, suite, created, source), items, notes)
