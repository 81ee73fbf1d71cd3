"""Read an Inspect evaluation log (``EvalLog``) into a servediff run.

    servediff import inspect logs/2026-01-01T12-00-00_gsm8k_abc.json --label stock --out a.jsonl

A ``.json`` log is read directly: ``version`` (the log format, 2 today), ``status``, ``eval``
(task, task_version, model, model_generate_config, dataset, packages), and ``samples``, each an
``EvalSample``: ``id``, ``epoch``, ``input``, ``target``, ``output`` (``completion`` and
``choices[0]`` with ``stop_reason`` and, when requested, per-token ``logprobs``), ``scores``
(scorer name → ``{value, answer, explanation}``; value ``"C"``/``"I"`` or 1/0 is right/wrong) and
``error``. A ``.eval`` log (a zip) is read through ``inspect_ai.log.read_eval_log`` when
inspect_ai is installed; ``inspect_log`` validates either and refuses an incomplete one. The
item's input is the conversation as sent (``messages`` before the model's answer: the solver's
prompt template applied), and items pair across runs by sample id, that prompt, the dataset
input, target and choices; runs pair only when their solver chain (prompt template included)
and sampling agree. Each epoch becomes one run, numbered as a repeat (``--epoch`` picks one),
so a log with two epochs at temperature 0 holds its own control.
"""

from __future__ import annotations

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
    sha256_json,
    suite_info,
)
from servediff.importers.inspect_log import Log, Sample, Score, completeness, deduplicated, load
from servediff.records import Item, SamplingInfo, sha256_text

FORMAT = "inspect EvalLog"


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
    if not isinstance(content, list) or not content:
        return None, None
    try:
        tokens = [str(t["token"]) for t in content]
        logprobs = [
            [
                str(t["token"]),
                float(t["logprob"]),
                [[str(a["token"]), float(a["logprob"])] for a in t.get("top_logprobs") or []],
            ]
            for t in content
        ]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise LogImportError(f"output.choices[0].logprobs: malformed ({type(exc).__name__}: {exc})") from exc
    return tokens, logprobs


def score_of(sample: Sample, scorer: str | None) -> tuple[str | None, Score | None]:
    scores = sample.scores or {}
    if not scores:
        return None, None
    name = scorer or next(iter(scores))
    if name not in scores:
        raise LogImportError(f"sample {sample.id}: no scorer {name!r}; it has {sorted(scores)}")
    return name, scores[name]


def answer_of(score: Score | None) -> str | None:
    """The scorer's extracted answer; ``match`` records an empty one when it found none."""
    answer = None if score is None else score.answer
    return None if answer is None or not str(answer).strip() else str(answer)


def prompt_sent(sample: Sample) -> Any:
    """The conversation the model answered: the logged messages before its final answer (the
    solver's template applied). A log without messages has only the dataset input."""
    messages = list(sample.messages or [])
    while messages and messages[-1].get("role") == "assistant":
        messages.pop()
    return plain_input(messages) if messages else plain_input(sample.input)


def pair_key(sample: Sample, prompt: Any) -> dict[str, str]:
    """What must match for two runs' samples to be one item, part by part, so a refusal can say
    which part differs (the prompt as sent, the dataset input, the target)."""
    return {
        "document": sha256_json([str(sample.id), plain_input(sample.input)]),
        "prompt": sha256_json(prompt),
        "target": sha256_json([sample.target, sample.choices]),
    }


def _error_text(error: dict[str, Any] | str | None) -> str | None:
    if isinstance(error, dict):
        return str(error.get("message") or "error")
    return str(error) if error else None


def item(sample: Sample, scorer: str | None) -> Item:
    output = sample.output
    choices = output.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = choice.get("message")
    text = output.get("completion") or text_of(message.get("content") if isinstance(message, dict) else None)
    tokens, logprobs = token_data(choice)
    error = _error_text(sample.error)
    _, score = score_of(sample, scorer)
    target = sample.target
    gold = " | ".join(map(str, target)) if isinstance(target, list) else target
    usage = output.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    meta: dict[str, Any] = {
        k: v for k, v in (sample.metadata or {}).items() if isinstance(v, (str, int, float, bool))
    }
    prompt = prompt_sent(sample)
    meta[PAIR_KEY] = pair_key(sample, prompt)
    meta["epoch"] = sample.epoch
    took = output.get("time")
    return Item(
        id=str(sample.id),
        input=prompt,
        text=str(text),
        sha256=sha256_text(str(text)),
        n_tokens=_int(usage.get("output_tokens")) or (len(tokens) if tokens else None),
        finish_reason=str(choice["stop_reason"]) if choice.get("stop_reason") is not None else None,
        # Inspect times each generate call; a log without it has no latency (None, not 0 s).
        latency_s=float(took) if isinstance(took, (int, float)) else None,
        error=error,
        tokens=tokens,
        token_source="engine" if tokens else None,
        logprobs=logprobs,
        answer=answer_of(score),
        gold=None if gold is None else str(gold),
        correct=None if score is None or error else correctness(score.value),
        metadata=meta,
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def sampling(spec: dict[str, Any], plan: dict[str, Any]) -> tuple[SamplingInfo, list[str]]:
    """What the log says was sent. A temperature the log does not record is unknown (None): the
    provider's default applied, and llama.cpp's server samples by default."""
    config = plan.get("config")
    cfg = {**(config if isinstance(config, dict) else {}), **generation(spec)}
    temperature = cfg.get("temperature")
    notes = (
        []
        if temperature is not None
        else ["temperature not set in the log: the provider's default applied, recorded as unknown"]
    )
    try:
        return SamplingInfo(
            temperature=None if temperature is None else float(temperature),
            seed=int(cfg.get("seed") or 0),
            max_tokens=int(cfg.get("max_tokens") or 0),
            top_logprobs=int(cfg.get("top_logprobs") or 0),
            enable_thinking=None,
        ), notes
    except (TypeError, ValueError) as exc:
        raise LogImportError(f"eval.model_generate_config: {exc}") from exc


def read(path: Path, o: ImportOptions) -> list[Imported]:
    """One run per epoch (or only ``o.epoch``): at temperature 0 a second epoch is the control."""
    log = load(path)
    samples, notes = deduplicated(path, log.samples or [])
    notes += completeness(path, log, samples, o.allow_incomplete)
    epochs = sorted({s.epoch for s in samples})
    if o.epoch is not None and o.epoch not in epochs:
        raise LogImportError(f"{path}: no samples for epoch {o.epoch}; it has epochs {epochs}")
    try:
        return [
            read_epoch(path, log, [s for s in samples if s.epoch == e], o, notes)
            for e in ([o.epoch] if o.epoch is not None else epochs)
        ]
    except LogImportError as exc:
        raise LogImportError(f"{path}: {exc}") from exc


def solver_of(plan: dict[str, Any]) -> tuple[list[Any], str | None]:
    """The solver chain (each step's name and parameters) and its prompt template, if any: two
    runs that asked the model differently are not one comparison, whatever their samples say."""
    steps: list[dict[str, Any]] = []
    templates: list[str] = []
    raw = plan.get("steps")
    for st in raw if isinstance(raw, list) else []:
        params = (st.get("params") or {}) if isinstance(st, dict) else {}
        if isinstance(st, dict):
            steps.append({"solver": st.get("solver"), "params": params})
        if isinstance(params, dict) and "template" in params:
            templates.append(str(params["template"]))
    return steps, (templates[0] if templates else None)


def generation(spec: dict[str, Any]) -> dict[str, Any]:
    """The generate config the log records, without its unset (null) fields."""
    generate = spec.get("model_generate_config")
    return {k: v for k, v in (generate if isinstance(generate, dict) else {}).items() if v is not None}


def engine_of(spec: dict[str, Any], o: ImportOptions) -> dict[str, Any]:
    return {
        "kind": "inspect",
        "model": o.model or spec.get("model"),
        "base_url": spec.get("model_base_url"),
        "options": {"model_args": spec.get("model_args") or {}, "generation": generation(spec)},
    }


def read_epoch(path: Path, log: Log, samples: list[Sample], o: ImportOptions, notes: list[str]) -> Imported:
    spec = log.eval
    scorer, _ = score_of(samples[0], o.choose)
    items = [item(s, scorer) for s in samples]
    plan = log.plan or {}
    steps, template = solver_of(plan)
    config = spec.get("config")
    config = config if isinstance(config, dict) else {}
    scorers = spec.get("scorers")
    scorers = scorers if isinstance(scorers, list) else []
    source = {
        "format": FORMAT,
        "format_version": log.version,
        "tool": "inspect_ai",
        "tool_version": (spec.get("packages") or {}).get("inspect_ai"),
        "status": log.status,
        "file": path.name,
        "file_sha256": file_sha256(path),
        "task": spec.get("task"),
        "scorer": scorer,
        "scorer_options": next(
            (sc.get("options") for sc in scorers if isinstance(sc, dict) and sc.get("name") == scorer), None
        ),
        "solver": steps,
        "prompt_template": template,
        "epoch": samples[0].epoch,
        "epochs": config.get("epochs"),
    }
    dataset = spec.get("dataset")
    dataset = dataset if isinstance(dataset, dict) else {}
    suite = suite_info(
        f"inspect/{spec.get('task')}",
        str(spec.get("task_version", 0)),
        str(dataset.get("name") or dataset.get("location") or path.name),
        items,
    )
    info, more = sampling(spec, plan)
    created = str(spec.get("created") or "")
    return Imported(header(o, engine_of(spec, o), info, suite, created, source), items, [*notes, *more])
