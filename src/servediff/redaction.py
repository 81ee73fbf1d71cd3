"""Secrets kept off disk: one place that decides what a credential looks like and blanks it.

    servediff experiment examples/vllm-spec.toml   # a launch argv with --api-key is recorded redacted

Everything servediff writes that can carry a credential goes through here: the error bodies an
engine records (servers echo the Authorization header back in 401s), the launch argv in run
headers and reports, and the server log written for launched engines. Two nets, because each
misses what the other catches: the *known values* (the API key servediff sends, the values of
secret flags and environment entries it launched with) are replaced wherever they appear, and
*shapes* (``Bearer …``, ``sk-…``, ``hf_…``, ``--api-key X``, ``HF_TOKEN=X``, ``user:pass@``) are
replaced even when servediff never saw the value. A leaf module: it imports nothing of servediff.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl

REDACTED = "<redacted>"

# Environment names like these may hold credentials (HF_TOKEN, OPENAI_API_KEY, DB_PASSWORD).
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)

# A flag is secret when its *last* word is one of these: --api-key, --api_key, --hf-token,
# --token, --admin-api-key. The last word only, so --max-num-batched-tokens, --tokenizer,
# --token-budget and --api-key-file (a path) keep their values.
SECRET_FLAG_WORDS = frozenset(
    {"key", "keys", "apikey", "token", "secret", "password", "passwd", "credential", "credentials"}
)
_WORDS = "|".join(sorted(SECRET_FLAG_WORDS))
# Shapes redacted inside any text, whether or not the value is known.
_FLAG_IN_TEXT = re.compile(
    rf"(?i)((?<![\w-])--?(?:[A-Za-z0-9]+[-_])*(?:{_WORDS}))(=|\s+)(?!<redacted>)([^\s\"',]+)"
)
_ASSIGNMENT = re.compile(
    r"\b([A-Za-z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)S?)=(?!<redacted>)(\S+)"
)
# 8+ characters: a credential, not the prose of "Bearer token required".
_BEARER = re.compile(r"(?i)\b(Bearer|Basic)\s+(?!<redacted>)[A-Za-z0-9._~+/=:-]{8,}")
_KEY_SHAPES = re.compile(r"\b(?:sk-[A-Za-z0-9_-]{8,}|hf_[A-Za-z0-9]{16,})")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@")
# A known value shorter than this is not replaced: "1" or "x" would blank unrelated text.
MIN_KNOWN = 4


def is_secret_flag(word: str) -> bool:
    """--api-key, --api_key=…, -token: a flag whose value is a credential."""
    if not word.startswith("-"):
        return False
    name = word.lstrip("-").split("=", 1)[0].lower()
    return re.split(r"[-_]", name)[-1] in SECRET_FLAG_WORDS


def redact_argv(argv: Sequence[str]) -> list[str]:
    """The argv with the value of every secret flag (next word or ``=value``), every
    ``NAME_KEY=value`` word and every credential shape replaced by ``<redacted>``."""
    out: list[str] = []
    hide_next = False
    for word in argv:
        if hide_next and not word.startswith("--"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        if is_secret_flag(word):
            if "=" in word:
                word = word.split("=", 1)[0] + "=" + REDACTED
            else:
                hide_next = True
        out.append(redact_text(word))
    return out


def argv_secrets(argv: Sequence[str]) -> list[str]:
    """The credential values an argv carries (what redact_argv blanks), to hunt for elsewhere."""
    found: list[str] = []
    for i, word in enumerate(argv):
        if is_secret_flag(word):
            if "=" in word:
                found.append(word.split("=", 1)[1])
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                found.append(argv[i + 1])
        elif m := _ASSIGNMENT.fullmatch(word):
            found.append(m[2])
    return [v for v in found if len(v) >= MIN_KNOWN]


def env_secrets(env: Mapping[str, str] | Iterable[tuple[str, str]]) -> list[str]:
    """The values of environment entries whose names look like credentials."""
    pairs = env.items() if isinstance(env, Mapping) else env
    return [v for k, v in pairs if SECRET_NAME.search(k) and len(v) >= MIN_KNOWN]


# Headers that describe the message rather than who sent it: their values are kept. Every other
# header a client sends may be a credential (api-key, x-api-key, cookie, a gateway's own), so its
# value is hunted for wherever a server might echo it.
PLAIN_HEADERS = frozenset(
    {
        "accept",
        "accept-encoding",
        "accept-language",
        "cache-control",
        "connection",
        "content-encoding",
        "content-length",
        "content-type",
        "expect",
        "host",
        "keep-alive",
        "te",
        "transfer-encoding",
        "user-agent",
    }
)
_SCHEMES = frozenset({"bearer", "basic", "digest", "token", "apikey"})


def header_secrets(headers: Iterable[tuple[str, str]], query: str = "") -> list[str]:
    """The values a client's request carries that may be credentials: every header's value but
    those of ``PLAIN_HEADERS`` and ``x-stainless-*`` (an SDK's self-description), each part of a
    value (``Bearer X`` gives X too, a cookie each of its values) and every query parameter's
    value. For ``redact_text(..., known=...)``: a server may echo any of them in a body."""
    found: list[str] = []
    for name, value in headers:
        low = name.lower()
        if low in PLAIN_HEADERS or low.startswith("x-stainless-"):
            continue
        found.append(value.strip())
        parts = re.split(r"[\s;,]+", value)
        found += [p for p in parts if p.lower() not in _SCHEMES]
        found += [p.split("=", 1)[1] for p in parts if "=" in p.strip("=")]
    found += [v for _, v in parse_qsl(query, keep_blank_values=False)]
    return sorted({v for v in found if len(v) >= MIN_KNOWN}, key=len, reverse=True)


def redact_env(env: Iterable[tuple[str, str]]) -> dict[str, str]:
    return {k: REDACTED if SECRET_NAME.search(k) else v for k, v in env}


def redact_text(text: str, known: Iterable[str] = (), shapes: bool = True) -> str:
    """``text`` with every known secret value and every credential shape replaced. Without
    ``shapes``, only the known values (for a model's own text, where ``sk-…`` may be prose)."""
    # Longest first, so a key that contains another known value is blanked whole.
    for value in sorted({v for v in known if v and len(v) >= MIN_KNOWN}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    if not shapes:
        return text
    text = _BEARER.sub(lambda m: f"{m[1]} {REDACTED}", text)
    text = _KEY_SHAPES.sub(REDACTED, text)
    text = _FLAG_IN_TEXT.sub(lambda m: f"{m[1]}{m[2]}{REDACTED}", text)
    text = _ASSIGNMENT.sub(lambda m: f"{m[1]}={REDACTED}", text)
    return _USERINFO.sub(lambda m: f"{m[1]}{REDACTED}@", text)


def redact_json(data: Any, known: Sequence[str]) -> Any:
    """A copy of parsed JSON with the known values blanked inside every string."""
    if isinstance(data, str):
        return redact_text(data, known, shapes=False)
    if isinstance(data, list):
        return [redact_json(v, known) for v in data]
    if isinstance(data, dict):
        return {k: redact_json(v, known) for k, v in data.items()}
    return data
