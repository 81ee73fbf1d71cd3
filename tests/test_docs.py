"""The README and the user guide: every ``servediff …`` command in their code blocks parses with
the current flags, the repository files they name exist, and their links resolve."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from servediff.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "guide").glob("*.md"))]
GUIDE = ("compare-servers", "experiments", "quality", "kl", "sampled", "gate", "cluster", "shadow", "index")
# A command ends at the shell's next operator; what follows is another program.
OPERATORS = {"|", "||", "&&", ";", ">", ">>", "2>", "&"}
# Folders of this repository: an argument under one of them names a file that must exist.
REPO_DIRS = ("examples", "tests", "scripts", "bench", "docs", "src")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
ASSIGNMENT = re.compile(r"^([A-Z_][A-Z0-9_]*)=(.*)$")


def logical_lines(block: str) -> list[str]:
    """Lines with their continuations joined: a trailing backslash, or (a YAML folded ``run: >``
    command) following lines that start with an option."""
    out: list[str] = []
    for raw in block.splitlines():
        line = raw.strip()
        if out and (out[-1].endswith("\\") or (line.startswith("--") and "servediff" in out[-1])):
            out[-1] = out[-1].rstrip("\\").rstrip() + " " + line
        else:
            out.append(line)
    return out


def commands(block: str) -> list[list[str]]:
    """Every servediff invocation of a code block, as argv, with the block's own ``NAME="…"``
    shell variables expanded."""
    variables: dict[str, str] = {}
    found = []
    for line in logical_lines(block):
        assigned = ASSIGNMENT.match(line)
        if assigned:
            variables[assigned[1]] = " ".join(shlex.split(assigned[2]))
            continue
        expanded = re.sub(r"\$\{?([A-Z_][A-Z0-9_]*)\}?", lambda m: variables.get(m[1], m[0]), line)
        try:
            words = shlex.split(expanded, comments=True)
        except ValueError:  # not shell (TOML, JSON): no command here
            continue
        for i, word in enumerate(words):
            if word == "servediff" and (i == 0 or words[i - 1] in {"--", "&&", ";", "run:", "-"}):
                rest = words[i + 1 :]
                end = next((j for j, w in enumerate(rest) if w in OPERATORS), len(rest))
                found.append(rest[:end])
    return found


def documented() -> list[tuple[str, list[str]]]:
    return [
        (f"{page.relative_to(ROOT)}: servediff {' '.join(argv)}", argv)
        for page in PAGES
        for block in FENCE.findall(page.read_text(encoding="utf-8"))
        for argv in commands(block)
    ]


def test_the_guide_has_a_page_per_job_and_the_readme_is_short() -> None:
    assert {p.stem for p in PAGES[1:]} >= set(GUIDE)
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250
    # the extraction sees commands on every page that has a code block of them
    assert {name.split(":")[0] for name, _ in documented()} >= {
        "README.md",
        *(f"docs/guide/{p}.md" for p in GUIDE if p != "index"),
    }


@pytest.mark.parametrize(("where", "argv"), documented(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_documented_command_parses(
    where: str, argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # output paths are checked against the working folder
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{where}: does not parse (exit {exc.code})")
    named = [a for a in argv if a.split("/")[0] in REPO_DIRS and "/" in a]
    missing = [a for a in named if not (ROOT / a).exists()]
    assert not missing, f"{where}: names files not in the repository: {missing}"


def test_the_ci_example_is_a_gate_with_junit() -> None:
    """The GitHub Actions example is a command users copy: it must stay valid and keep its flags."""
    gates = [
        build_parser().parse_args(argv)
        for name, argv in documented()
        if name.startswith("docs/guide/gate.md") and "--junit" in argv
    ]
    assert gates and all(a.command == "gate" and a.junit == Path("gate.xml") for a in gates)
    assert gates[0].margin == 0.02


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_between_pages_resolve(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in t]
    broken = [t for t in targets if t and not (page.parent / t).exists()]
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"
