"""Render the report model: Markdown and HTML from templates, summary.json from the model itself.

    servediff report runs/*.jsonl --md report.md --html report.html
    servediff compare runs/*.jsonl --json

Both templates escape by default, so text from a record (completions, tokens, labels, item ids,
errors) can reach a page only escaped: the HTML environment autoescapes (Jinja's HTML escaping),
the Markdown environment passes every interpolated value through ``md`` unless a filter built
it as Markdown (``code``, ``tok``). Nothing here computes a number; see ``report.model``.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import IO, Any

import msgspec
from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup
from pydantic import BaseModel

from servediff.compare.audit import AuditAnalysis
from servediff.compare.comparison import DivergenceViews
from servediff.compare.verify_result import VerifyResult
from servediff.gate.result import GateReport
from servediff.report import figures, fmt, html_doc, markdown_doc, mdtext, sections, wording
from servediff.report.model import Report
from servediff.report.sections import audit, verify

CSP = "default-src 'none'; style-src 'unsafe-inline'"


class Md(str):
    """Markdown built by a filter: the Markdown environment does not escape it again."""

    __slots__ = ()


def md(value: object) -> str:
    """Plain text in Markdown (``mdtext.cell``): no markup, raw HTML or table break."""
    return value if isinstance(value, Md) else mdtext.cell(value)


def code(value: object) -> Md:
    """A code span that no content can close (``mdtext.code``)."""
    return Md(mdtext.code(value))


def tok(value: str | None) -> Md:
    """A token with its whitespace visible: its JSON string form, in a code span."""
    return code("end of sequence" if value is None else json.dumps(value, ensure_ascii=False))


def _as_md(f: Callable[..., str]) -> Callable[..., Md]:
    """A number format whose output (digits, signs, units) needs no Markdown escaping."""
    return lambda *a: Md(f(*a))


def _finalize(value: object) -> object:
    return md(value) if value is not None else ""


def _environment(**escaping: Any) -> Environment:
    """What both report environments share: the templates, strict names, the shared sentences
    (``w``) and formats (``fmt``); ``escaping`` says how each format escapes what it prints."""
    env = Environment(
        loader=PackageLoader("servediff.report", "templates"),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        **escaping,
    )
    env.globals["w"] = wording
    env.globals["fmt"] = fmt
    return env


@cache
def _markdown_env() -> Environment:
    env = _environment(autoescape=False, finalize=_finalize, keep_trailing_newline=True)
    env.filters.update({k: _as_md(f) for k, f in fmt.FILTERS.items()})
    env.filters.update(code=code, tok=tok)
    env.globals["slot"] = lambda where, r: Md(markdown_doc.render(sections.slot(where, r)))
    return env


@cache
def _html_env() -> Environment:
    env = _environment(autoescape=True)
    env.filters.update(fmt.FILTERS)
    env.globals["figures"] = svg_figures
    env.globals["slot"] = lambda where, r: html_doc.render(sections.slot(where, r))
    return env


class _SvgFigures:
    """Figures for the HTML template, each drawn through ``figures.drawn`` (a failure becomes a
    note in the page, never the end of the report)."""

    def __getattr__(self, name: str) -> Any:
        fn = getattr(figures, name)
        return lambda *args, **kwargs: Markup(figures.drawn(fn, *args, **kwargs))


svg_figures = _SvgFigures()


def markdown(report: Report) -> str:
    text = _markdown_env().get_template("report.md.j2").render(r=report)
    return re.sub(r"\n{3,}", "\n\n", text).rstrip() + "\n"


def markdown_summary(report: Report) -> str:
    """The verdict table and the Summary, as ``demo`` prints them at the end."""
    text = markdown(report)
    start = text.find("## Verdicts")
    start = text.index("## Summary") if start < 0 else start
    end = text.find("\n## ", text.index("## Summary") + 1)
    return text[start : end if end > 0 else None].rstrip()


def _css() -> Markup:
    return Markup((resources.files("servediff.report") / "style.css").read_text(encoding="utf-8"))


def html(report: Report) -> str:
    return _html_env().get_template("report.html.j2").render(r=report, css=_css(), csp=Markup(CSP))


def _plain(x: Any, held: list[DivergenceViews] | None = None) -> Any:
    """JSON values: a dataclass becomes its fields plus its scalar properties (accuracy, n, Δ:
    derived in the model, so a reader of summary.json need not derive them again). ``held``:
    where given, a comparison's divergences are not laid out but held there, a marker in their
    place (``write_summary`` writes them a slice at a time)."""
    kind = type(x)
    if kind is str or kind is int or kind is bool or x is None:  # most values: asked first
        return x
    if held is not None and kind is DivergenceViews:
        held.append(x)
        return _marker(len(held) - 1)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return _fields(x, [f.name for f in dataclasses.fields(x)], held)
    if isinstance(x, msgspec.Struct):  # the report model's structs read as its dataclasses do
        return _fields(x, x.__struct_fields__, held)
    if isinstance(x, BaseModel):  # a record's own type (the sampling of a run header)
        return _plain(x.model_dump(), held)
    if isinstance(x, float):
        return None if math.isnan(x) or math.isinf(x) else x  # JSON has no NaN
    if isinstance(x, dict):
        return {k: _plain(v, held) for k, v in x.items()}
    if isinstance(x, (list, tuple, DivergenceViews)):
        return [_plain(v, held) for v in x]
    return x


def _fields(x: Any, names: Sequence[str], held: list[DivergenceViews] | None = None) -> dict[str, Any]:
    out = {name: _plain(getattr(x, name), held) for name in names}
    for name in _properties(type(x)):
        value = getattr(x, name)
        if value is None or isinstance(value, (bool, int, float, str)):
            out[name] = _plain(value)
    return out


_PROPERTIES: dict[type, tuple[str, ...]] = {}


def _properties(kind: type) -> tuple[str, ...]:
    """A type's public properties, found once per type: a shadow compare's summary lays out
    300,000 divergence views, and scanning the class for each was most of the time."""
    found = _PROPERTIES.get(kind)
    if found is None:
        names = (n for n, a in vars(kind).items() if isinstance(a, property) and not n.startswith("_"))
        found = _PROPERTIES[kind] = tuple(names)
    return found


def summary(report: Report) -> dict[str, Any]:
    """summary.json and ``compare --json``: the model itself, with its schema version."""
    out: dict[str, Any] = {"record": "servediff-summary", **_plain(report)}
    return out


# Divergence views laid out and written at a time by ``write_summary``.
SLICE = 5_000


def summary_json(report: Report, slice_size: int = SLICE) -> bytes:
    """``summary`` as JSON text indented by two, UTF-8 (what ``write_summary`` writes)."""
    out = io.BytesIO()
    write_summary(report, out, slice_size)
    return out.getvalue()


# A marker no record's text holds: where a comparison's divergences go in the summary's text.
_NONCE = uuid.uuid4().hex


def _marker(n: int) -> str:
    return f"\x00{_NONCE}:{n}"


def write_summary(report: Report, out: IO[bytes], slice_size: int = SLICE) -> None:
    """``summary`` as JSON text indented by two, UTF-8, written to ``out``: the values of
    ``json.dumps(summary(report), indent=2)`` in the same order and layout (non-ASCII text as
    UTF-8 rather than escaped; numbers in msgspec's shortest form, ``0.00001`` for ``1e-05``),
    in a fraction of the time and memory.

    msgspec encodes: the standard library's encoder takes its pure-Python path when asked to
    indent (5.6 s at a million shadow items, 280 MB of JSON). A comparison's divergences are laid
    out ``slice_size`` at a time, each slice encoded and let go before the next: at a million items
    the 300,000 views and their dictionaries, held at once, took the summary past 2 GiB."""
    held: list[DivergenceViews] = []
    plain = {"record": "servediff-summary", **_plain(report, held)}
    try:
        text = msgspec.json.format(msgspec.json.encode(plain), indent=2)
    except (TypeError, UnicodeEncodeError):  # a lone surrogate: the standard library escapes it
        out.write(json.dumps(summary(report), indent=2).encode("ascii"))
        return
    at = 0
    for n, views in enumerate(held):
        marker = msgspec.json.encode(_marker(n))
        start = text.index(marker, at)
        line = text.rfind(b"\n", 0, start) + 1
        pad = b"\n" + b" " * (len(text[line:start]) - len(text[line:start].lstrip(b" ")))
        out.write(text[at:start])
        _write_views(views, pad, out, slice_size)
        at = start + len(marker)
    out.write(text[at:])


def _write_views(views: DivergenceViews, pad: bytes, out: IO[bytes], slice_size: int) -> None:
    """A list of divergence views as ``msgspec.json.format`` lays it out at the indentation
    ``pad`` (a newline and the spaces of the line that holds the list)."""
    if not len(views):
        out.write(b"[]")
        return
    out.write(b"[")
    for start in range(0, len(views), slice_size):
        rows = [_plain(views.passing(i)) for i in range(start, min(start + slice_size, len(views)))]
        body = msgspec.json.format(msgspec.json.encode(rows), indent=2)[1:-2]  # "\n  {…}" lines
        if start:
            out.write(b",")
        out.write(body.replace(b"\n", pad))
    out.write(pad + b"]")


@dataclass(frozen=True, slots=True)
class Outputs:
    """Where a report goes: any of the three renderings, None for those not asked for."""

    md: Path | None = None
    html: Path | None = None
    json: Path | None = None


def write_reports(report: Report, out: Outputs) -> tuple[Path, ...]:
    """Render the model once per asked format and write each file (folders made as needed);
    the one writer behind ``compare``, ``report``, ``experiment`` and ``demo``."""
    makers: tuple[tuple[Path | None, Callable[[Report], str]], ...] = (
        (out.md, markdown),
        (out.html, html),
    )
    written = []
    for path, make in makers:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(make(report), encoding="utf-8")
            written.append(path)
    if out.json is not None:
        out.json.parent.mkdir(parents=True, exist_ok=True)
        with out.json.open("wb") as f:
            write_summary(report, f)
        written.append(out.json)
    return tuple(written)


# --- gate (servediff gate): its own small model, rendered by the same environment ---


def gate_markdown(g: GateReport) -> str:
    text = _markdown_env().get_template("gate.md.j2").render(g=g)
    return re.sub(r"\n{3,}", "\n\n", text).rstrip() + "\n"


def gate_summary(g: GateReport) -> dict[str, Any]:
    """``gate --json``: the gate model itself, with the exit code it implies."""
    out: dict[str, Any] = {"record": "servediff-gate", "schema_version": 1, **_plain(g)}
    return out


# --- audit (servediff audit): its analysis laid out by the same document backends ---


def audit_markdown(a: AuditAnalysis) -> str:
    return markdown_doc.render(audit.blocks(a)) + "\n"


def audit_html(a: AuditAnalysis) -> str:
    body = html_doc.render(audit.blocks(a))
    page = _html_env().get_template("page.html.j2")
    return page.render(title=f"servediff audit {a.promise.label}", body=body, css=_css(), csp=Markup(CSP))


def verify_markdown(r: VerifyResult) -> str:
    return markdown_doc.render(verify.blocks(r)) + "\n"


def verify_html(r: VerifyResult) -> str:
    body = html_doc.render(verify.blocks(r))
    page = _html_env().get_template("page.html.j2")
    return page.render(title="servediff verify", body=body, css=_css(), csp=Markup(CSP))


def audit_summary(a: AuditAnalysis) -> dict[str, Any]:
    """``audit --json``: the analysis itself, with its exit code and verdict line."""
    # the headline cost is a property of the analysis, not a field: laid out here as before
    out: dict[str, Any] = {**_plain(a), "cost": _plain(a.cost), "exit_code": a.exit_code}
    out["verdict_line"] = audit.verdict_line(a)
    return out
