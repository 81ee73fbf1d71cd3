"""Models by name: the registry, its cache, and fetching (``servediff models``)."""

from servediff.models.cache import ModelError, cache_root, resolve
from servediff.models.registry import MODELS, ModelEntry, Part, entry

__all__ = ["MODELS", "ModelEntry", "ModelError", "Part", "cache_root", "entry", "resolve"]
