"""Suites: what is asked. ``SUITES`` maps a name to its loader; a ``.jsonl`` path is a user suite.

servediff run --suite prompts | branching | shared-prefix | gsm8k | mmlu | mmlu-letter | path/to/suite.jsonl
    [--data PATH] [--limit N]
servediff run --suite humaneval --allow-code-execution ...   (scored by running the model's code)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from servediff.suites import branching, gsm8k, mmlu, prompts, shared_prefix
from servediff.suites.base import Score, Suite


@dataclass(frozen=True, slots=True)
class SuiteOptions:
    limit: int | None = None  # deterministic subsample of this many items
    seed: int = 0  # subsampling seed
    path: Path | None = None  # a local data file instead of the default source
    allow_code_execution: bool = False  # humaneval runs model-written code: only when the user says so


def _prompts(o: SuiteOptions) -> Suite:
    suite = prompts.builtin() if o.path is None else prompts.from_jsonl(o.path)
    if o.limit is not None:
        from servediff.suites.sampling import first_n

        suite = first_n(suite, o.limit)
    return suite


def _branching(o: SuiteOptions) -> Suite:
    if o.path is not None:
        raise ValueError("the branching suite is built in: it takes no path")
    suite = branching.builtin()
    if o.limit is not None:
        from servediff.suites.sampling import first_n

        suite = first_n(suite, o.limit)
    return suite


def _shared_prefix(o: SuiteOptions) -> Suite:
    if o.path is not None:
        raise ValueError("the shared-prefix suite is built in: it takes no path")
    suite = shared_prefix.builtin()
    if o.limit is not None:
        from servediff.suites.sampling import first_n

        suite = first_n(suite, o.limit)
    return suite


def _gsm8k(o: SuiteOptions) -> Suite:
    from servediff.suites.sampling import random_n

    suite = gsm8k.load(o.path)
    return suite if o.limit is None else random_n(suite, o.limit, o.seed)


def _mmlu(o: SuiteOptions) -> Suite:
    return mmlu.load(o.path, o.limit, o.seed)  # stratified by subject


def _mmlu_letter(o: SuiteOptions) -> Suite:
    from servediff.suites import mmlu_letter

    return mmlu_letter.load(o.path, o.limit, o.seed)  # mmlu's items, scored by letter log-likelihood


def _humaneval(o: SuiteOptions) -> Suite:
    from servediff.suites import humaneval

    if not o.allow_code_execution:
        raise ValueError(humaneval.REFUSAL)
    return humaneval.load(o.path, o.limit)  # the first N problems, in dataset order


SUITES: dict[str, Callable[[SuiteOptions], Suite]] = {
    "prompts": _prompts,
    "branching": _branching,
    "shared-prefix": _shared_prefix,
    "gsm8k": _gsm8k,
    "mmlu": _mmlu,
    "mmlu-letter": _mmlu_letter,
    "humaneval": _humaneval,
}


def load_suite(name: str, options: SuiteOptions | None = None) -> Suite:
    options = options or SuiteOptions()
    if name in SUITES:
        return SUITES[name](options)
    path = Path(name)
    if path.suffix == ".jsonl":
        if not path.is_file():
            raise ValueError(f"suite file not found: {path}")
        return _prompts(SuiteOptions(limit=options.limit, seed=options.seed, path=path))
    raise ValueError(f"unknown suite {name!r}: use one of {sorted(SUITES)} or a .jsonl file")


__all__ = ["SUITES", "Score", "Suite", "SuiteOptions", "load_suite"]
