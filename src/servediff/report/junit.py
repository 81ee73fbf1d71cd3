"""The gate as JUnit XML, the test-report format CI systems display: one test case per check.

    servediff gate ... --junit gate.xml

Cases: ``determinism`` (the control against its repeat) and ``non-inferiority[SUITE]``. A
failed check is a <failure>; a check that engine errors left undecided is an <error>.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from servediff.gate.result import GateReport
from servediff.report import fmt


def _case(suite: ET.Element, name: str, outcome: str | None, kind: str, message: str) -> None:
    case = ET.SubElement(suite, "testcase", classname="servediff.gate", name=name)
    if outcome is not None:
        ET.SubElement(case, outcome, type=kind, message=message).text = message
    else:
        ET.SubElement(case, "system-out").text = message


def document(g: GateReport) -> ET.ElementTree:
    d = g.determinism
    root = ET.Element("testsuites")
    suite = ET.SubElement(root, "testsuite", name=f"servediff gate {g.b} vs {g.a}")
    text = f"control {g.a}: {d.status} ({d.identical}/{d.compared} identical, {d.errors} errored)"
    if d.status == "skipped":
        case = ET.SubElement(suite, "testcase", classname="servediff.gate", name="determinism")
        ET.SubElement(case, "skipped", message="--no-determinism-check")
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
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    for tag, attr in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
        suite.set(attr, str(sum(1 for c in cases if c.find(tag) is not None)))
    return ET.ElementTree(root)


def write(g: GateReport, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tree = document(g)
    ET.indent(tree)
    tree.write(path, encoding="utf-8", xml_declaration=True)
