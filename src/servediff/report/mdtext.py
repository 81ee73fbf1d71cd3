"""Text from records, made safe to interpolate into the Markdown report.

    servediff compare runs/*.jsonl --md report.md

A label, item id, token, suite name or error string is data: in Markdown it must not become
markup (raw HTML, a link, emphasis) nor break the table row or code span it sits in. Two
helpers, one for each place text goes: ``cell`` for prose and table cells (CommonMark escapes
and entities work there), ``code`` for code spans (where no escape works, so the fence is made
longer than any run of backticks inside). The report's Markdown template applies them to
everything it interpolates.
"""

from __future__ import annotations

import json
import re

# Markdown punctuation that can start markup inline: code spans, emphasis, links, strikethrough,
# and GitHub's math (``$…$``).
_MARKUP_CHARS = re.compile(r"([`*_\[\]~$])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_BACKTICKS = re.compile(r"`+")


def cell(text: object) -> str:
    """Plain text for a table cell or a line of prose: whitespace shown (``\\n``), and nothing
    that could close the cell (``|``), open HTML (``<``), an entity (``&``) or markup."""
    s = json.dumps(str(text), ensure_ascii=False)[1:-1]  # also doubles backslashes: "\\" shows "\"
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKUP_CHARS.sub(r"\\\1", s).replace("|", "\\|")


def code(text: object) -> str:
    """A code span that shows ``text`` literally and cannot be closed early by it.

    Inside a code span, backslashes and entities are literal, so the only way to keep a backtick
    in is a longer fence (CommonMark 6.1); a space pads content that starts or ends with one.
    ``<`` stays literal text there. A pipe is still escaped: GFM splits a table row on it even
    inside a code span. Control characters are shown as JSON escapes, as in ``cell``."""
    s = _CONTROL.sub(lambda m: json.dumps(m[0])[1:-1], str(text)).replace("|", "\\|")
    if not s:
        return "` `"
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(s)), default=0) + 1)
    pad = " " if s[0] in "` " or s[-1] in "` " else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def fenced(text: str) -> str:
    """A fenced code block that shows ``text`` literally: its fence is longer than any run of
    backticks inside (CommonMark 4.5), and nothing in a code block is markup or HTML."""
    fence = "`" * max(3, max((len(run) for run in _BACKTICKS.findall(text)), default=0) + 1)
    return f"{fence}\n{text}\n{fence}"
