"""What each kind of server is sent of the sampling parameters, and what it applies by itself.

    servediff run --engine http --base-url http://127.0.0.1:8080 --out runs/server.jsonl

A field a request leaves out is decided by the server's own default, and those differ between
servers and from servediff's (llama-cpp-python's server: repeat_penalty 1.1, the embedded engine:
1.0). So every field servediff knows goes into every request, under the name the server uses;
the run's header records the server's profile, the fields it was sent and, where the server
reports them (llama-server's ``/props``), its own defaults.
"""

from __future__ import annotations

from typing import Any, Literal

from servediff.types import SamplingParams

# What a run sends of the sampling: "all" (every field above, explicitly: no server default
# decides an answer; right for measuring a configuration), or "minimal", what a typical client
# sends (temperature, seed, max_tokens; the server's defaults decide the rest): right for
# measuring what *those* clients get. On llama-cpp-python's server the two differ by its default
# repeat penalty of 1.1: the same 20 prompts, greedy, agreed on 1 of 20 between them.
Send = Literal["all", "minimal"]
SENDS: tuple[Send, ...] = ("all", "minimal")
ALWAYS_SENT = ("temperature", "seed", "max_tokens")

# The sampling fields each server is sent on every request, as (servediff's name, the server's
# name), so that no default of the server decides an answer: llama-cpp-python's server applies
# repeat_penalty 1.1 unless told, llama-server min_p 0.05 and top_k 40 (its /props says so).
# Penalties change greedy answers too: they act on the logits before the argmax. An OpenAI-strict
# server ("generic") may reject fields it does not know, so it is sent OpenAI's own only. vLLM's
# and SGLang's "no top-k cut" is -1 (older vLLM refuses 0): top_k goes to any server other than
# llama.cpp's only when it cuts, and then the user asked for it.
_LLAMA_CPP_SAMPLING = (
    ("top_p", "top_p"),
    ("top_k", "top_k"),  # llama.cpp: 0 is no cut
    ("min_p", "min_p"),
    ("repeat_penalty", "repeat_penalty"),
    ("presence_penalty", "presence_penalty"),
    ("frequency_penalty", "frequency_penalty"),
)
_VLLM_SAMPLING = (
    ("top_p", "top_p"),
    ("min_p", "min_p"),
    ("repeat_penalty", "repetition_penalty"),
    ("presence_penalty", "presence_penalty"),
    ("frequency_penalty", "frequency_penalty"),
)
SAMPLING_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "llamacpp": _LLAMA_CPP_SAMPLING,
    "llama-server": _LLAMA_CPP_SAMPLING,
    "vllm": _VLLM_SAMPLING,
    "sglang": _VLLM_SAMPLING,
    "generic": (
        ("top_p", "top_p"),
        ("presence_penalty", "presence_penalty"),
        ("frequency_penalty", "frequency_penalty"),
    ),
}


def sampling_body(profile: str, params: SamplingParams) -> dict[str, Any]:
    """The sampling fields of a request to a ``profile`` server, from ``SamplingParams``
    (temperature, seed and max_tokens travel in every request and are not repeated here)."""
    fields = SAMPLING_FIELDS.get(profile, SAMPLING_FIELDS["generic"])
    body = {theirs: getattr(params, ours) for ours, theirs in fields}
    if params.top_k and "top_k" not in body:
        body["top_k"] = params.top_k
    return body


def sent_fields(profile: str, send: Send) -> list[str]:
    """The sampling fields a run sends a ``profile`` server besides ``ALWAYS_SENT``."""
    return sorted(sampling_body(profile, SamplingParams())) if send == "all" else []


# What /props reports of llama-server's default sampling, where a request leaves a field out.
DEFAULT_KEYS = ("temperature", "top_k", "top_p", "min_p", "typical_p", "repeat_penalty",
                "repeat_last_n", "presence_penalty", "frequency_penalty", "dry_multiplier",
                "xtc_probability", "top_n_sigma", "mirostat", "samplers")  # fmt: skip


def sampling_defaults(props: Any) -> dict[str, Any] | None:
    """A server's own sampling defaults from llama-server's ``/props``
    (``default_generation_settings``, its ``params`` in newer builds); None where not reported."""
    if not isinstance(props, dict) or not isinstance(props.get("default_generation_settings"), dict):
        return None
    settings = props["default_generation_settings"]
    params = settings.get("params") if isinstance(settings.get("params"), dict) else settings
    return {k: params[k] for k in DEFAULT_KEYS if k in params}


def server_profile(models: Any, props: Any) -> str:
    """The profile of a server met by URL alone: llama-server answers ``/props`` with its
    generation defaults; the others say who they are in ``/v1/models``' ``owned_by``
    (llama-cpp-python's server "me", vLLM "vllm", SGLang "sglang")."""
    if sampling_defaults(props) is not None:
        return "llama-server"
    data = models.get("data") if isinstance(models, dict) else None
    owners = (
        {str(m.get("owned_by")) for m in data if isinstance(m, dict)} if isinstance(data, list) else set()
    )
    return _OWNERS.get(owners.pop(), "generic") if len(owners) == 1 else "generic"


_OWNERS = {"me": "llamacpp", "vllm": "vllm", "sglang": "sglang"}
