"""servediff: does my serving configuration change my model's output, and its quality?

suite → engine → run record → compare → report. ``servediff demo`` runs the whole study on
the embedded llama.cpp engine; ``servediff --help`` lists the rest.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
