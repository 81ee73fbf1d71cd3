"""Text from records, made something XML 1.0 can hold: the JUnit file and the report's SVG plots.

    servediff gate ... --junit gate.xml

XML 1.0 forbids some characters outright, escaped or not (§2.2 Char): the C0 controls but tab, LF
and CR, lone surrogates, U+FFFE and U+FFFF. ElementTree and matplotlib write them as they are,
and the file no longer parses (`not well-formed (invalid token)` for a label such as
``$'x\\x01y\\x1b[31m'``). Every text servediff writes into XML passes through ``xml_text``.
"""

from __future__ import annotations

import re

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(text: str) -> str:
    """``text`` with every character XML 1.0 forbids written as its Python escape (``\\x01``,
    ``\\ud800``): the label stays readable and tells what was there."""
    return _NOT_XML.sub(lambda m: repr(m.group())[1:-1], text)
