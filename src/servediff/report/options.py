"""The loader's former name: it lives in ``compare.loader`` (the analysis reads the records, the
report lays out what it found). Kept so that callers written against this name still import."""

from servediff.compare.loader import ReportOptions, is_sweep, load

__all__ = ["ReportOptions", "is_sweep", "load"]
