"""Experiments: one TOML file describes the model, the suites and the configurations; servediff
starts each engine in turn, checks it, runs the suites and the control, stops it, and reports.

    servediff experiment examples/llamacpp-flash.toml
"""

from servediff.experiment.conductor import Outcome, run_experiment
from servediff.experiment.plan import plan_slots
from servediff.experiment.source import ExperimentError
from servediff.experiment.spec import Experiment, load_experiment

__all__ = ["Experiment", "ExperimentError", "Outcome", "load_experiment", "plan_slots", "run_experiment"]
