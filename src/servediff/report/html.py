"""The HTML report: one self-contained file (inline CSS and SVG, no script, no network).

    servediff report runs/*.jsonl --html report.html

Rendered from a Study, which is computed from records only. Every string that came from a
record (completions, tokens, answers, labels, paths) goes through ``esc`` (``html.escape``);
plots are SVG from matplotlib, which escapes its own text. A Content-Security-Policy that
allows no script at all is a second wall behind the escaping.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

from servediff.compare import hazard as hz
from servediff.compare.study import PairResult, Study
from servediff.report import evidence, figures, markup, scores
from servediff.report.experiment import load_sweep, verification
from servediff.report.markdown import imported_origin, launch_argv, ratio, verdict_control

Section = Callable[[Study], list[str]]

CSP = "default-src 'none'; style-src 'unsafe-inline'"

# The page's only styling, read once; it is inlined so the file stays self-contained.
CSS = (resources.files("servediff.report") / "style.css").read_text(encoding="utf-8")


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def token(text: str) -> str:
    """A token shown so that whitespace is visible: its JSON string form, escaped."""
    return f'<code class="tok">{esc(json.dumps(text, ensure_ascii=False))}</code>'


def table(head: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "") -> str:
    """Cells are HTML already: callers escape what they put in."""
    th = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def summary(study: Study) -> list[str]:
    out = ["<h2 id='summary'>Summary</h2><ul>"]
    out += [f"<li class='warn'>Warning: {esc(w)}</li>" for w in study.warnings]
    for p in study.controls:
        out.append(
            f"<li>Control <code>{esc(p.a)}</code> ({esc(p.suite)}): <b>{ratio(p.identical, p.total)}</b> "
            f"identical across repeats — {esc(verdict_control(p))}.</li>"
        )
    if not study.controls:
        out.append(
            "<li>No control: no configuration was run twice, so a difference between configurations "
            "cannot be told apart from run-to-run noise.</li>"
        )
    for p in study.pairs:
        classes = Counter(v.klass or "unclassified" for v in evidence.views(p, study.probes, study.near_tie))
        why = ", ".join(f"{n} {esc(k)}" for k, n in classes.most_common())
        out.append(
            f"<li><code>{esc(p.a)}</code> vs <code>{esc(p.b)}</code> ({esc(p.suite)}): "
            f"<b>{ratio(p.identical, p.total)}</b> byte-identical"
            + (f"; divergences: {why}" if why else "")
            + ".</li>"
        )
    for q in scores.paired_all(study):
        out.append(
            f"<li>{esc(q.suite)}: {len(q.changed)} of {q.n} scored items changed correctness between "
            f"<code>{esc(q.a)}</code> and <code>{esc(q.b)}</code> ({q.a_only} right only under "
            f"<code>{esc(q.a)}</code>, {q.b_only} only under <code>{esc(q.b)}</code>; exact McNemar "
            f"p = {q.p_value:.3g}).</li>"
        )
    errors = sum(p.errors for p in [*study.controls, *study.pairs])
    if errors:
        out.append(f"<li>{errors} item comparison(s) left out because a run recorded an engine error.</li>")
    return [*out, "</ul>"]


def method(study: Study) -> list[str]:
    rows = []
    for c in study.configurations:
        h = c.runs[0].header
        e = h.engine
        what = e.get("knobs") or launch_argv(e) or e.get("options") or {}
        rows.append(
            [
                f"<code>{esc(c.label)}</code>",
                esc(c.suite),
                esc(e.get("kind")),
                esc(e.get("model")),
                esc(e.get("base_url") or "in-process"),
                esc(e.get("server_version") or "not exposed"),
                f"<code>{esc(json.dumps(what, sort_keys=True))}</code>",
                str(len(c.runs)),
            ]
        )
    out = [
        "<h2 id='method'>Method</h2>",
        table(["configuration", "suite", "engine", "model", "where", "version", "settings", "runs"], rows),
    ]
    out.append("<ul>")
    for suite in study.suites:
        h = next(c for c in study.configurations if c.suite == suite).runs[0].header
        s = h.sampling
        origins = [
            f"<li>{imported_line(c.label, src, c.runs[0].header.engine)}</li>"
            for c in study.configurations
            if c.suite == suite and isinstance(src := c.runs[0].header.extra.get("imported_from"), dict)
        ]
        out.append(
            f"<li>Suite <code>{esc(suite)}</code> v{esc(h.suite.version)} ({esc(h.suite.source)}), "
            f"{len(h.suite.item_ids)} items, content SHA-256 "
            f"<code>{esc(h.suite.content_sha256[:16])}…</code>; "
            f"temperature {s.temperature}, seed {s.seed}, max_tokens {s.max_tokens}, top_logprobs "
            f"{s.top_logprobs or 'not requested'}; concurrency {h.concurrency}.</li>"
        )
        out += origins
    first = study.configurations[0].runs[0].header
    out.append(
        f"<li>servediff {esc(first.tool_version)}"
        + (f" (git {esc(first.git_revision[:10])})" if first.git_revision else "")
        + f", Python {esc(first.environment.get('python'))}, {esc(first.environment.get('platform'))}; "
        f"first run created {esc(first.created)}.</li></ul>"
    )
    return out


def imported_line(label: str, source: dict[str, Any], engine: dict[str, Any]) -> str:
    return esc(imported_origin(label, source, engine))


def experiment_tables(study: Study) -> list[str]:
    """An experiment's verification and load-sweep sections, carried over from Markdown."""
    lines = [*verification(study), *load_sweep(study)]
    return [f"<section id='experiment'>{markup.to_html(lines)}</section>"] if lines else []


def plot(name: str, svg: str, caption: str) -> str:
    return f"<figure class='plot' id='plot-{esc(name)}'>{svg}<figcaption>{caption}</figcaption></figure>"


def _comparisons(study: Study) -> list[PairResult]:
    return [*study.controls, *study.pairs]


def _hazard_cell(h: hz.Hazard | None) -> str:
    if h is None:
        return "n/a"
    rate, low, high = h.per_1000()
    if h.upper_bound_only:
        return f"&lt; {high:.3g} (no divergence; one-sided 95 %)"
    return f"{rate:.3g} [{low:.3g}, {high:.3g}]"


def survival_block(study: Study) -> list[str]:
    curves = evidence.survivals(study.pairs)
    if not curves:
        return ["<p class='muted'>No survival curve: no pair of configurations has token data.</p>"]
    rows = []
    for s in curves:
        h = evidence.hazard(s)
        p300 = "n/a" if h is None else f"{h.p_within(300)[0]:.1%}"
        counts = [str(len(s.durations)), str(s.n_events), f"{s.exposure:,}"]
        rows.append([esc(s.label), *counts, _hazard_cell(h), p300, str(s.missing)])
    caption = (
        "Share of items whose completions are still identical after x generated tokens, per configuration "
        "pair (Kaplan–Meier; identical items are censored at their length), with the constant-hazard fit "
        "exp(−λx) and its exact Poisson 95 % band."
    )
    head = [
        "pair",
        "items",
        "divergences",
        "tokens at risk",
        "hazard per 1,000 tokens [95 % CI]",
        "P(a 300-token completion diverges)",
        "left out (no token data)",
    ]
    return [plot("survival", figures.survival_svg(curves), caption), table(head, rows)]


def gap_block(study: Study) -> list[str]:
    by_class: dict[str, list[float]] = {}
    for p in study.pairs:
        for v in evidence.views(p, study.probes, study.near_tie):
            if v.gap is not None:
                by_class.setdefault(v.klass or "unclassified", []).append(v.gap)
    n = sum(map(len, by_class.values()))
    if not n:
        return [
            "<p class='muted'>No gap histogram: no divergence has logprobs recorded or probed at the "
            "first differing token (run with <code>--top-logprobs 5</code>, or "
            "<code>servediff probe</code>).</p>"
        ]
    caption = (
        f"A's top-1 − top-2 logprob gap at the first differing token, by class ({n} divergences with "
        f"logprobs; threshold {study.near_tie:g} nats). Where each number comes from is given with its "
        "divergence below."
    )
    return [plot("gaps", figures.gap_histogram_svg(by_class, study.near_tie), esc(caption))]


def divergence_plots(study: Study) -> list[str]:
    out = [
        "<h2 id='plots'>Where and how the completions part</h2>",
        *survival_block(study),
        *gap_block(study),
    ]
    for m in scores.agreement_matrices(study):
        caption = (
            "Share of byte-identical completions for every pair of configurations; the diagonal is the "
            "control (a configuration against its own repeat), blank where there was none."
        )
        out.append(plot(f"matrix-{m.suite}", figures.agreement_matrix_svg(m), caption))
    return out


def _accuracy_rows(acc: Sequence[scores.Accuracy]) -> list[list[str]]:
    return [
        [
            esc(a.suite),
            f"<code>{esc(a.label)}</code>",
            f"{a.correct}/{a.n}",
            f"{a.value:.1%} [{a.low:.1%}, {a.high:.1%}]",
        ]
        for a in acc
    ]


def _paired_rows(pairs: Sequence[scores.Paired]) -> list[list[str]]:
    return [
        [esc(q.suite), f"<code>{esc(q.a)}</code>", f"<code>{esc(q.b)}</code>", str(q.n), str(q.a_only),
         str(q.b_only), f"{q.p_value:.3g}", f"{q.delta:+.1%} [{q.delta_low:+.1%}, {q.delta_high:+.1%}]",
         esc(q.verdict)]
        for q in pairs
    ]  # fmt: skip


def quality(study: Study) -> list[str]:
    acc = scores.accuracies(study)
    if not acc:
        return []
    caption = (
        "Accuracy per configuration and benchmark; error bars are 95 % Wilson intervals. Errored items are "
        "left out, never counted as wrong."
    )
    pairs = scores.paired_all(study)
    head = ["suite", "A", "B", "scored in both", "right only under A", "right only under B",
            "exact McNemar p", "Δ accuracy B − A [Newcombe 95 %]",
            f"verdict at a {study.margin:.1%} margin"]  # fmt: skip
    out = [
        "<h2 id='quality'>Does the configuration change quality?</h2>",
        plot("accuracy", figures.accuracy_svg(acc), caption),
        table(["suite", "configuration", "correct", "accuracy [95 % CI]"], _accuracy_rows(acc)),
        table(head, _paired_rows(pairs)),
    ]
    for p in study.pairs:
        rows = scores.subject_agreement(p)
        if rows:
            svg = figures.subject_agreement_svg(rows, f"{p.suite}: {p.a} vs {p.b}")
            text = "Per subject: share of items where both configurations extracted the same answer."
            out.append(plot(f"subjects-{p.suite}-{p.a}-{p.b}", svg, text))
    return [*out, *changed_items(pairs)]


def changed_items(pairs: Sequence[scores.Paired]) -> list[str]:
    rows = [
        [
            esc(c.suite),
            esc(c.item_id),
            esc(c.subject or ""),
            esc(c.gold),
            f"<code>{esc(c.a)}</code>",
            esc(c.a_answer),
            "✔" if c.a_correct else "✘",
            f"<code>{esc(c.b)}</code>",
            esc(c.b_answer),
            "✘" if c.a_correct else "✔",
        ]
        for q in pairs
        for c in q.changed
    ]
    out = ["<h3 id='changed'>Every scored item that changed correctness</h3>"]
    if not rows:
        return [*out, "<p>None: every item scored under both configurations kept its correctness.</p>"]
    head = ["suite", "item", "subject", "gold", "A", "A answer", "A", "B", "B answer", "B"]
    return [*out, table(head, rows, "changed")]


def _topk(top: evidence.TopK, a_tok: str, b_tok: str) -> str:
    if not top:
        return "<p class='muted'>no top-k recorded at this position</p>"
    rows = []
    for tok, lp in top:
        who = " ".join(x for x, t in (("A", a_tok), ("B", b_tok)) if t == tok)
        rows.append([token(tok), f"{lp:.4f}", esc(who)])
    return table(["token", "logprob", "chosen by"], rows, "topk")


def divergence_view(p: PairResult, v: evidence.DivergenceView) -> str:
    klass = v.klass or "unclassified"
    tok = "n/a" if v.token_index is None else str(v.token_index)
    gap = "not observed" if v.gap is None else f"{v.gap:.4f} nats (A's top-1 − top-2)"
    sides = []
    for side, label, first, rest, top, source in (
        ("a", p.a, v.a_first, v.a_rest, v.a_top, v.a_source),
        ("b", p.b, v.b_first, v.b_rest, v.b_top, v.b_source),
    ):
        sides.append(
            f"<div class='{side}'><b>{side.upper()}: <code>{esc(label)}</code></b>"
            f"<pre><mark class='first'>{esc(first)}</mark>{esc(rest)}</pre>"
            f"<div class='muted'>top-k at token {tok}: {esc(source)}</div>"
            f"{_topk(top, v.a_first, v.b_first)}</div>"
        )
    note = f"<div class='muted'>{esc(v.note)}</div>" if v.note else ""
    return (
        f"<article class='divergence' data-item='{esc(v.item_id)}'>"
        f"<h4>item {esc(v.item_id)} "
        f"<span class='badge {esc(klass.replace(' ', '-'))}'>{esc(klass)}</span></h4>"
        f"<div class='muted'>first difference at character {v.char_index}, token {tok}: "
        f"{token(v.a_first)} vs {token(v.b_first)}; gap {esc(gap)}</div>{note}"
        f"<details><summary>common prefix ({len(v.prefix)} characters)</summary><pre>{esc(v.prefix)}</pre>"
        f"</details><div class='sides'>{''.join(sides)}</div></article>"
    )


def divergences(study: Study) -> list[str]:
    out = ["<h2 id='divergences'>Every divergence</h2>"]
    for p in _comparisons(study):
        if p.divergences:
            out.append(
                f"<h3><code>{esc(p.a)}</code> vs <code>{esc(p.b)}</code> ({esc(p.suite)}, "
                f"{esc(p.kind)}): {len(p.divergences)} of {p.total}</h3>"
            )
            out += [divergence_view(p, v) for v in evidence.views(p, study.probes, study.near_tie)]
    if len(out) == 1:
        out.append("<p>None: every compared completion was byte-identical.</p>")
    return out


def limitations(study: Study) -> list[str]:
    return [
        "<h2 id='limits'>What this study does not establish</h2><ul>",
        "<li>Byte identity is about text, not quality: a divergence can be better, worse or equivalent. "
        "Only a scored benchmark says whether accuracy moved.</li>",
        "<li>Determinism is shown for these prompts, this hardware, these library versions and this "
        "request order; another batch composition or machine can differ.</li>",
        "<li>A gap computed from logprobs recorded during a run is that run's own view; a separate "
        "one-pass probe is another computation with its own error.</li>",
        "<li>Intervals are 95 % and per comparison: with many pairs, some will exclude the truth by "
        "chance.</li>",
        "</ul>",
    ]


SECTIONS: list[Section] = [
    summary,
    method,
    experiment_tables,
    divergence_plots,
    quality,
    divergences,
    limitations,
]


def render(study: Study, title: str = "servediff report", sections: Sequence[Section] | None = None) -> str:
    body = [
        f"<h1>{esc(title)}</h1>",
        "<nav class='muted'><a href='#summary'>Summary</a> · <a href='#method'>Method</a> · "
        "<a href='#plots'>Where they part</a> · <a href='#quality'>Quality</a> · "
        "<a href='#divergences'>Every divergence</a> · <a href='#limits'>Limits</a></nav>",
    ]
    for section in sections or SECTIONS:
        body += section(study)
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>\n{chr(10).join(body)}\n</body></html>\n"
    )
