"""Read lm-evaluation-harness ``--log_samples`` output into a servediff run.

    servediff import lm-eval out/m/samples_gsm8k_2026-01-01T12-00-00.123456.jsonl --label stock --out a.jsonl

The samples file (``samples_<task>_<date>.jsonl``, written by lm-eval's EvaluationTracker) has
one line per (document, filter): ``doc_id``, ``doc``, ``target``, ``arguments`` (per request
``gen_args_i`` → ``arg_0`` the prompt, ``arg_1`` the generation kwargs or the continuation),
``resps`` / ``filtered_resps``, ``filter``, ``metrics`` (names) and their values, and
``doc_hash`` / ``prompt_hash`` / ``target_hash`` (SHA-256 of the JSON document, the prompt and
the target). Items pair across runs by ``doc_id`` and those three hashes. The sibling
``results_<date>.json`` gives the client and its ``model_args`` (where it was served), the
lm-eval version, the task's version and prompt template, and how many samples were logged.

Generation tasks: the completion is ``resps[0][0]``, the answer the filtered response (lm-eval's
``[invalid]``, a failed extraction, is no answer). Multiple-choice (log-likelihood) tasks: the
"completion" is the continuation with the highest log-likelihood (per character under
``--metric acc_norm``, as lm-eval normalises), so two configurations are identical when they
pick the same choice. An item whose choices all have the same log-likelihood is a tie that
carries no information (a server that returns no continuation log-probabilities gives 0.0 for
each); the import counts them and says so.

A samples file is trusted as far as its results file vouches for it: without one (renamed,
moved) the model, the server, the seed and the number of documents evaluated are unknown, so
the import refuses it unless ``--allow-incomplete``.

The tests run on logs written by lm-eval itself (scripts/make_import_fixtures.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from servediff.importers.imported import (
    PAIR_KEY,
    Imported,
    ImportOptions,
    LogImportError,
    correctness,
    file_sha256,
    header,
    read_text,
    suite_info,
)
from servediff.records import Item, SamplingInfo, sha256_text

FORMAT = "lm-eval log_samples"
# The sample fields this reader relies on; they have been stable since lm-eval 0.4.3
# (doc_hash/prompt_hash/target_hash, filter, metrics, sanitized gen_args_i arguments).
FORMAT_VERSION = "0.4"
NAME = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[\d\-.]+)\.jsonl$")
RESULTS = re.compile(r"^results_\d{4}-\d{2}-\d{2}T[\d\-.]+\.json$")
BINARY_METRICS = ("exact_match", "acc", "acc_norm")
NO_ANSWER = ("[invalid]", "")  # lm-eval's regex filter writes "[invalid]" when nothing matched
# Clients that build an OpenAI-style payload: they drop do_sample and send temperature (default 0)
# and seed (default 1234) — lm_eval/models/openai_completions.py, _create_payload.
API_CLIENTS = ("local-completions", "local-chat-completions", "openai-completions", "openai-chat-completions")
API_SEED = 1234
SECRET = re.compile(r"(^|_)(key|token|secret|password)$", re.IGNORECASE)  # api_key, auth_token, …


class SampleLine(BaseModel):
    """The fields of a samples line this reader relies on (the metric values are extra fields)."""

    model_config = ConfigDict(extra="allow")
    doc_id: int | str
    arguments: dict[str, dict[str, Any]] | list[list[Any]]
    resps: list[list[Any]]
    filtered_resps: list[Any] = []
    filter: str | None = None
    metrics: list[str] = []
    doc_hash: str | None = None
    prompt_hash: str | None = None
    target_hash: str | None = None


def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    return f"field {'.'.join(str(x) for x in first['loc'])}: {first['msg']}"


def hash_string(text: str) -> str:
    """lm-eval's hash_string: SHA-256 of the UTF-8 text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_lines(path: Path) -> list[dict[str, Any]]:
    if RESULTS.match(path.name):
        raise LogImportError(
            f"{path}: this is lm-eval's results file; import the samples_<task>_<date>.jsonl beside "
            "it (written with --log_samples)"
        )
    out = []
    for n, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LogImportError(f"{path}:{n}: not JSON ({exc})") from exc
        if not isinstance(raw, dict) or "doc_id" not in raw or "resps" not in raw:
            raise LogImportError(f"{path}:{n}: not an lm-eval samples line (no doc_id/resps)")
        try:
            SampleLine.model_validate(raw)
        except ValidationError as exc:
            raise LogImportError(f"{path}:{n}: {_first_error(exc)}") from exc
        out.append(raw)
    if not out:
        raise LogImportError(f"{path}: not an lm-eval samples file (no doc_id/resps lines)")
    return out


def arguments(sample: dict[str, Any]) -> list[list[Any]]:
    """Requests' arguments as lists: saved files hold {"gen_args_0": {"arg_0": …}}, older ones lists."""
    args = sample.get("arguments")
    try:
        if isinstance(args, dict):
            out = [
                [req[f"arg_{j}"] for j in range(len(req))]
                for req in (args[f"gen_args_{i}"] for i in range(len(args)))
            ]
        else:
            out = [list(a) for a in args] if isinstance(args, list) else []
    except (KeyError, TypeError) as exc:
        raise LogImportError(f"doc {sample.get('doc_id')}: malformed arguments (missing {exc})") from exc
    if not out or not out[0]:
        raise LogImportError(f"doc {sample.get('doc_id')}: no arguments recorded")
    return out


def results_for(path: Path, allow_incomplete: bool) -> tuple[dict[str, Any], list[str]]:
    """The results file lm-eval wrote beside the samples (same date in the name), and notes.
    Without it nothing vouches for the samples' count or says where and how they were made."""
    m = NAME.match(path.name)
    results = path.parent / f"results_{m['date']}.json" if m else None
    try:
        data = json.loads(results.read_text(encoding="utf-8")) if results else None
        why = "" if isinstance(data, dict) else "it is not a JSON object"
    except OSError as exc:
        data, why = None, exc.strerror or str(exc)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        data, why = None, f"not JSON ({exc})"
    if isinstance(data, dict):
        return data, []
    missing = (
        f"its results file {results.name} cannot be read ({why})"
        if results
        else "its name is not lm-eval's samples_<task>_<date>.jsonl, so its results file cannot be found"
    )
    if not allow_incomplete:
        raise LogImportError(
            f"{path}: {missing}: the number of documents evaluated, the model, where it was served "
            "and the seed are unknown, so a cut file cannot be told from a whole one "
            "(--allow-incomplete imports it anyway)"
        )
    return {}, [f"imported although {missing}: model, server and seed not recorded"]


def pick(samples: list[dict[str, Any]], wanted: str | None, field: str, what: str) -> str | None:
    found = list(dict.fromkeys(str(s.get(field)) for s in samples if s.get(field) is not None))
    if wanted is not None and wanted not in found:
        raise LogImportError(f"no {what} {wanted!r} in this file; it has {found}")
    return wanted or (found[0] if found else None)


def metric_name(sample: dict[str, Any], wanted: str | None) -> str:
    names = [str(m) for m in sample.get("metrics", [])] or [k for k in BINARY_METRICS if k in sample]
    if wanted is not None:
        if wanted not in sample:
            raise LogImportError(f"no metric {wanted!r} in the samples; they have {names}")
        return wanted
    for name in (*BINARY_METRICS, *names):
        if name in sample:
            return name
    raise LogImportError(f"doc {sample.get('doc_id')}: no per-sample metric found (pass --metric)")


def completion(
    sample: dict[str, Any], args: list[list[Any]], metric: str
) -> tuple[str, str | None, dict[str, Any]]:
    """(text, answer, extra metadata) for a generation or a multiple-choice sample."""
    resps = sample["resps"]
    if len(args) == 1 and (len(args[0]) < 2 or isinstance(args[0][1], dict)):
        text = str(resps[0][0]) if resps and resps[0] else ""
        filtered = sample.get("filtered_resps") or [None]
        answer = filtered[0][0] if isinstance(filtered[0], list) and filtered[0] else filtered[0]
        return text, answer_of(None if answer is None else str(answer)), {}
    # One log-likelihood request per choice: resps[i] == [[loglik, is_greedy]] (as strings).
    logliks = [float(r[0][0] if isinstance(r[0], list) else r[0]) for r in resps]
    choices = [str(a[1]) for a in args]
    if len(logliks) != len(choices) or not choices:
        raise ValueError(f"{len(logliks)} log-likelihoods for {len(choices)} choices")
    # acc_norm divides by the continuation's length in characters (lm-eval's completion_len).
    scores = [ll / max(len(c), 1) for ll, c in zip(logliks, choices)] if metric == "acc_norm" else logliks
    best = max(range(len(scores)), key=scores.__getitem__)
    extra: dict[str, Any] = {"choice_logliks": logliks}
    if len(set(scores)) == 1 and len(scores) > 1:
        extra["choice_tie"] = True  # every choice scored alike: the pick is the first, by position
    return choices[best], str(best), extra


def prompt_of(raw: Any) -> tuple[str, Any]:
    """(the text lm-eval hashed into ``prompt_hash``, the input to record).

    A chat-templated request is a ``JsonChatStr`` (a one-field tuple holding the messages as
    JSON), which the samples file writes as a one-element list.
    """
    if isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], str):
        text = raw[0]
        try:
            messages = json.loads(text)
        except json.JSONDecodeError:
            return text, text
        return text, messages if isinstance(messages, list) else text
    return str(raw), str(raw)


def answer_of(value: str | None) -> str | None:
    """A filtered response that is lm-eval's failed-extraction marker (or nothing) is no answer."""
    return None if value is None or value.strip() in NO_ANSWER else value


def gold_of(target: Any) -> str:
    """The gold answer: a GSM8K-style worked solution ends in ``#### <number>``, the part compared."""
    text = str(target)
    return text.rsplit("####", 1)[1].strip() if "####" in text else text


def item(sample: dict[str, Any], metric: str) -> Item:
    args = arguments(sample)
    hashed, prompt = prompt_of(args[0][0])
    if sample.get("prompt_hash") not in (None, hash_string(hashed)):
        raise LogImportError(f"doc {sample['doc_id']}: prompt_hash does not match the recorded prompt")
    try:
        text, answer, extra = completion(sample, args, metric)
    except (IndexError, TypeError, ValueError) as exc:
        raise LogImportError(f"doc {sample['doc_id']}: malformed resps ({exc})") from exc
    # By part, so a refusal can say which differs: the document, the prompt as sent, the target.
    hashes = {"document": sample.get("doc_hash"), "prompt": sample.get("prompt_hash")}
    hashes["target"] = sample.get("target_hash")
    raw_doc = sample.get("doc")
    doc: dict[str, Any] = raw_doc if isinstance(raw_doc, dict) else {}
    meta: dict[str, Any] = {PAIR_KEY: hashes, "filter": sample.get("filter"), **extra}
    if isinstance(doc.get("subject"), str):
        meta["subject"] = doc["subject"]
    return Item(
        id=str(sample["doc_id"]),
        input=prompt,
        text=text,
        sha256=sha256_text(text),
        latency_s=None,  # lm-eval logs no timings
        answer=answer,
        gold=gold_of(sample.get("target")),
        correct=correctness(sample.get(metric)),
        metadata=meta,
    )


def generation_kwargs(sample: dict[str, Any]) -> dict[str, Any]:
    args = arguments(sample)
    one = len(args) == 1 and len(args[0]) > 1 and isinstance(args[0][1], dict)
    return dict(args[0][1]) if one else {}


def sampling(sample: dict[str, Any], results: dict[str, Any], model_args: dict[str, Any]) -> SamplingInfo:
    """What was sent. API clients (local-*, openai-*) ignore ``do_sample`` and send
    ``temperature`` (default 0); other models sample only when ``do_sample`` is set. Without a
    results file the client is unknown: the temperature is known only where both readings agree,
    and the seed not at all."""
    kwargs = generation_kwargs(sample)
    config = results.get("config") or {}
    api = float(kwargs.get("temperature", 0.0))
    local = 0.0 if not kwargs.get("do_sample", False) else float(kwargs.get("temperature", 1.0))
    temperature: float | None
    seed: int | None
    if not results:
        temperature, seed = (api if api == local else None), None
    elif str(config.get("model") or "") in API_CLIENTS:
        temperature, seed = api, int(model_args.get("seed", API_SEED))
    else:
        temperature, seed = local, int(config.get("random_seed", 0) or 0)
    tokens = kwargs.get("max_tokens", kwargs.get("max_gen_toks", model_args.get("max_gen_toks", 256)))
    return SamplingInfo(
        temperature=temperature,
        seed=seed,
        max_tokens=int(tokens) if kwargs else 0,
        top_logprobs=0,
        enable_thinking=None,
    )


def model_arguments(config: dict[str, Any]) -> dict[str, Any]:
    """``model_args`` as a dict: lm-eval 0.4.13 writes a dict, older versions a ``k=v,k=v``
    string. Keys that hold secrets are dropped: they never reach a record."""
    raw = config.get("model_args") or {}
    if isinstance(raw, str):
        raw = dict(a.split("=", 1) for a in raw.split(",") if "=" in a)
    if not isinstance(raw, dict):
        return {}
    return {str(k): v for k, v in raw.items() if not SECRET.search(str(k))}


def identity(
    path: Path, results: dict[str, Any], o: ImportOptions, picked: dict[str, Any], sample: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The engine as lm-eval recorded it (client, URL, model id, arguments, generation kwargs),
    and where the run came from (tool, version, task, filter, metric, prompt template)."""
    config = results.get("config") or {}
    args = model_arguments(config)
    task_config = (results.get("configs") or {}).get(picked["task"]) or {}
    model = o.model or args.get("model") or args.get("pretrained") or results.get("model_name")
    engine = {
        "kind": "lm-eval",
        "model": model or "unknown",
        "model_source": results.get("model_source"),
        "base_url": args.get("base_url"),
        "options": {
            "client": config.get("model"),
            "model_args": args,
            "generation": generation_kwargs(sample),
            # API clients leave results' chat_template empty (the server applies its own): the
            # prompt's shape says it. Local models (hf, vllm) record the template they applied.
            "chat_template": bool(results.get("chat_template"))
            or isinstance(prompt_of(arguments(sample)[0][0])[1], list),
            "chat_template_sha256": results.get("chat_template_sha") or None,
        },
    }
    source = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "tool": "lm-eval",
        "tool_version": results.get("lm_eval_version"),
        "git_hash": results.get("git_hash"),
        "file": path.name,
        "file_sha256": file_sha256(path),
        **picked,
        "prompt_template": task_config.get("doc_to_text"),
        "chat_template_sha256": results.get("chat_template_sha") or None,
        "num_fewshot": task_config.get("num_fewshot"),
    }
    return engine, source


def expected_count(results: dict[str, Any], task: str) -> int | None:
    n = ((results.get("n-samples") or {}).get(task) or {}).get("effective")
    return n if isinstance(n, int) else None


def read(path: Path, o: ImportOptions) -> Imported:
    samples = read_lines(path)
    results, notes = results_for(path, o.allow_incomplete)
    m = NAME.match(path.name)
    task = m["task"] if m else path.stem
    chosen = pick(samples, o.choose, "filter", "filter")
    rows = [s for s in samples if chosen is None or str(s.get("filter")) == chosen]
    metric = metric_name(rows[0], o.metric)
    try:
        items = sorted((item(s, metric) for s in rows), key=lambda it: (len(it.id), it.id))
    except LogImportError as exc:
        raise LogImportError(f"{path}: {exc}") from exc
    if len({it.id for it in items}) != len(items):
        raise LogImportError(f"{path}: a doc_id appears twice under filter {chosen!r}")
    expected = expected_count(results, task)
    if expected is not None and expected != len(items):
        raise LogImportError(
            f"{path}: {len(items)} sample(s) under filter {chosen!r}, but its results file says "
            f"{expected} were evaluated (a truncated or mismatched file)"
        )
    engine, source = identity(path, results, o, {"task": task, "filter": chosen, "metric": metric}, rows[0])
    version = str((results.get("versions") or {}).get(task, "unknown"))
    date = results.get("date")
    when = float(date) if isinstance(date, (int, float)) else path.stat().st_mtime
    created = datetime.fromtimestamp(when, timezone.utc).isoformat(timespec="seconds")
    suite = suite_info(f"lm-eval/{task}", version, path.name, items)
    filters = list(dict.fromkeys(str(s.get("filter")) for s in samples))
    notes += [f"filter {chosen!r} of {filters}"] if len(filters) > 1 else []
    ties = sum(1 for it in items if it.metadata.get("choice_tie"))
    if ties:
        source["tied_items"] = ties
        notes.append(tie_note(ties, len(items)))
    info = sampling(rows[0], results, model_arguments(results.get("config") or {}))
    if info.temperature is None:
        notes.append("temperature unknown (no results file to say which client sent the request)")
    return Imported(header(o, engine, info, suite, created, source), items, notes)


def tie_note(ties: int, n: int) -> str:
    return (
        f"{ties} of {n} item(s) score every choice alike (e.g. all log-likelihoods 0.0, from a server "
        "that returns no continuation log-probabilities): their pick is the first choice, and their "
        "scores carry no information"
    )
