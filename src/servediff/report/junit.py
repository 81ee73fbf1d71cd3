"""The gate and the audit as JUnit XML, the test-report format CI systems display: one test case
per check.

    servediff gate ... --junit gate.xml
    servediff audit ... --junit audit.xml

Cases: ``determinism`` (the control against its repeat) and ``non-inferiority[SUITE]``. A
failed check is a <failure>; a check that engine errors left undecided is an <error>.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from servediff.compare.audit import AuditAnalysis
from servediff.gate.result import GateReport
from servediff.report import fmt
from servediff.report.sections.audit import verdict_line
from servediff.report.xmltext import xml_text


def _element(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    """The one way this module adds an element: its text and attributes through ``xml_text``."""
    el = ET.SubElement(parent, tag, {k: xml_text(v) for k, v in attrs.items()})
    if text is not None:
        el.text = xml_text(text)
    return el


def _case(
    suite: ET.Element,
    name: str,
    outcome: str | None,
    kind: str,
    message: str,
    classname: str = "servediff.gate",
) -> None:
    case = _element(suite, "testcase", classname=classname, name=name)
    if outcome is not None:
        _element(case, outcome, message, type=kind, message=message)
    else:
        _element(case, "system-out", message)


def document(g: GateReport) -> ET.ElementTree:
    d = g.determinism
    root = ET.Element("testsuites")
    suite = _element(root, "testsuite", name=f"servediff gate {g.b} vs {g.a}")
    text = f"control {g.a}: {d.status} ({d.identical}/{d.compared} identical, {d.errors} errored)"
    if d.status == "skipped":
        case = _element(suite, "testcase", classname="servediff.gate", name="determinism")
        _element(case, "skipped", message="--no-determinism-check")
    else:
        outcome = {"deterministic": None, "NOT deterministic": "failure"}.get(d.status, "error")
        _case(suite, "determinism", outcome, d.status, text)
    last = g.checkpoints[-1] if g.checkpoints else None
    # both bounds: a pass is decided by the lower one, a fail by the upper one
    bounds = f"[{fmt.spp(last.low)}, {fmt.spp(last.high)}] pp" if last else "-"
    text = (
        f"{g.verdict}: {g.b} vs {g.a} at a {fmt.pp(g.margin)} pp margin, alpha {g.alpha}; "
        f"{g.tally.n} paired items, delta {fmt.spp(g.tally.delta)} pp, confidence sequence {bounds}; "
        f"{g.errors} errored item(s) left out"
    )
    outcome = None if g.verdict == "pass" else "error" if g.exit_code == 2 else "failure"
    _case(suite, f"non-inferiority[{g.suite}]", outcome, g.verdict, text)
    return _counted(root, suite)


def _counted(root: ET.Element, suite: ET.Element) -> ET.ElementTree:
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    for tag, attr in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
        suite.set(attr, str(sum(1 for c in cases if c.find(tag) is not None)))
    return ET.ElementTree(root)


def _save(tree: ET.ElementTree, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.indent(tree)
    tree.write(path, encoding="utf-8", xml_declaration=True)


def write(g: GateReport, path: Path) -> None:
    _save(document(g), path)


@dataclass(frozen=True, slots=True)
class Case:
    """One check of another command (the audit): ``outcome`` None passed, else "failure"/"error"."""

    name: str
    outcome: str | None
    kind: str
    message: str


def write_cases(title: str, classname: str, cases: Sequence[Case], path: Path) -> None:
    """A one-suite JUnit file of ``cases``, laid out as the gate's."""
    root = ET.Element("testsuites")
    suite = _element(root, "testsuite", name=title)
    for c in cases:
        _case(suite, c.name, c.outcome, c.kind, c.message, classname)
    _save(_counted(root, suite), path)


def write_audit(a: AuditAnalysis, path: Path) -> None:
    """Two cases: the promise (failure when it diverged) and the negative control (an error when
    it did not diverge: the audit tested nothing)."""
    p = a.promise
    promise_outcome = "failure" if a.verdict == "fail" else "error" if a.verdict == "error" else None
    cases = [Case("promise", promise_outcome, a.verdict, verdict_line(a))]
    if a.control is None and a.verdict == "fail":
        cases.append(Case("negative-control", "skipped", "not needed", "not run: the promise diverged"))
    elif a.control is None:
        cases.append(Case("negative-control", "error", "missing", "no negative control was run"))
    else:
        c = a.control
        weak = "error" if c.divergent == 0 else None
        text = f"{c.label}: {c.divergent} of {c.trials} trials diverged (it must: else nothing was tested)"
        cases.append(Case("negative-control", weak, "too weak" if weak else "diverged", text))
    write_cases(f"servediff audit {p.label}", "servediff.audit", cases, path)
