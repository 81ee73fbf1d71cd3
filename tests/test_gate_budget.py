"""The gate's budget plan against simulated gates, and the gate choosing its budget from it."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from scipy.stats import norm

from servediff.compare import gate_budget
from servediff.compare.stats.sequential import Tally
from servediff.gate import GateOptions, budget_plan
from tests.helpers.scripts import load_script

SIM = Path(__file__).resolve().parent.parent / "bench" / "gate_sim.py"


def _sim() -> ModuleType:
    return load_script(SIM)


@pytest.mark.parametrize(("discordance", "power"), [(0.04, 0.8), (0.04, 0.9), (0.10, 0.8), (0.10, 0.9)])
def test_the_planned_budget_gives_the_power_in_simulated_gates(discordance: float, power: float) -> None:
    """1,000 gates at Δ = 0 (the sequential rule of bench/gate_sim.py, the one compare.sequential
    decides by): they pass within the budget at least as often as planned (one standard error is
    about 0.012), and use no more items on average than the plan expects, nor 18 % fewer."""
    p = gate_budget.plan(0.02, 0.025, discordance, power)
    sim = _sim()
    c, b = sim.counts(np.random.default_rng(7), 1000, p.budget, discordance, 0.0)
    verdict, used = sim.sequential(c, b, 0.02, 0.025, 10)
    assert p.power >= power and (verdict == 1).mean() >= power - 0.03
    assert 0.82 * p.expected <= used.mean() <= 1.02 * p.expected


@pytest.mark.parametrize("budget", [100, 500, 2000])
def test_the_power_at_small_budgets_is_the_gates_own_rule(budget: int) -> None:
    """The plan's power against 4,000 simulated gates (bench/gate_sim.py's rule, vectorised apart
    from the plan's exact computation) at 6 % discordance: within 3.5 standard errors. The
    first-passage approximation used before gave 0.0000, 0.058 and 0.73 here, where the gate's
    rule passes about 1.5 %, 18 % and 75 % of unchanged candidates."""
    p = gate_budget.at_budget(0.02, 0.025, 0.06, budget)
    assert p.method == "exact" and "exact, the gate's own rule" in gate_budget.describe(p)
    sim = _sim()
    c, b = sim.counts(np.random.default_rng(budget), 4000, budget, 0.06, 0.0)
    verdict, used = sim.sequential(c, b, 0.02, 0.025, 10)
    simulated = float((verdict == 1).mean())
    se = max(np.sqrt(simulated * (1 - simulated) / 4000), 1 / 4000)
    assert abs(p.power - simulated) <= 3.5 * se
    assert abs(p.expected - used.mean()) <= 0.02 * budget


def test_large_budgets_keep_the_approximation_and_say_so() -> None:
    p = gate_budget.at_budget(0.02, 0.025, 0.06, gate_budget.EXACT_MAX + 10)
    assert p.method == "approximation" and "first-passage approximation" in gate_budget.describe(p)


def test_the_fixed_n_design_is_the_normal_approximation() -> None:
    p = gate_budget.plan(0.02, 0.025, 0.04, 0.8)
    z = norm.ppf(1 - 0.025) + norm.ppf(p.power)
    assert p.fixed_n == int(np.ceil(z * z * 0.04 / 0.02**2))
    assert 785 <= p.fixed_n <= 800  # 785 at exactly 0.8


def test_what_the_gate_saves_depends_on_the_power() -> None:
    """At the power a fixed-n design is usually planned for the gate expects more items than it;
    asked for more power it expects fewer: the dependence BENCHMARKS.md tabulates."""
    low, high = (gate_budget.plan(0.02, 0.025, 0.04, power) for power in (0.8, 0.95))
    assert low.expected > low.fixed_n and high.expected < high.fixed_n
    assert low.budget < high.budget and low.saving < high.saving
    wider = gate_budget.plan(0.02, 0.025, 0.10, 0.8)
    assert wider.budget > low.budget and wider.expected > low.expected


def test_a_budget_too_small_for_the_power_says_what_it_would_need() -> None:
    p = gate_budget.plan(0.02, 0.025, 0.10, 0.9, limit=500)
    assert p.budget == 500 and p.power < 0.9
    assert p.needed == gate_budget.plan(0.02, 0.025, 0.10, 0.9).budget
    assert f"power 0.90 needs {p.needed:,} items" in gate_budget.describe(p)


def test_a_power_past_the_planner_s_reach_is_said_unreachable_not_a_count() -> None:
    """Before: "power 0.80 needs 200,000 items" where the search only stopped at its cap."""
    p = gate_budget.plan(0.001, 0.025, 0.5, 0.8, limit=3000)
    assert p.unreachable and p.needed is None
    line = gate_budget.describe(p)
    assert "not reached within 200,000 items" in line and "needs 200,000" not in line
    q = gate_budget.at_budget(0.001, 0.025, 0.5, 3000)
    assert q.unreachable and "needs" not in gate_budget.describe(q)


def test_a_power_near_one_is_not_rounded_to_one() -> None:
    """Before: ``--power 0.999999`` was printed "power 1.00"."""
    assert gate_budget.power_text(0.999999) == "0.999999"
    assert gate_budget.power_text(0.8) == "0.80" and gate_budget.power_text(0.996) == "0.996"
    p = gate_budget.plan(0.02, 0.025, 0.04, 0.999999, limit=500)
    assert "power 0.999999 needs" in gate_budget.describe(
        p
    ) or "power 0.999999 is not" in gate_budget.describe(p)


def test_a_budget_with_little_power_says_so_and_what_power_would_take() -> None:
    # The GPU gate's case: 6 % discordance, 130 items. Its power at Δ = 0 is near 0, where a
    # fixed-n "design of the same power" is meaningless; the line used to claim the gate saved 83 %.
    p = gate_budget.at_budget(0.02, 0.025, 0.06, 130)
    assert p.power < 0.05 and p.fixed_n is None and p.saving is None
    assert p.needed == gate_budget.plan(0.02, 0.025, 0.06, gate_budget.PLANNING_POWER).budget > 1000
    line = gate_budget.describe(p)
    assert f"power 0.80 needs {p.needed:,} items" in line and "fixed-n" not in line
    assert "more likely ends inconclusive" in line
    # a budget with the planning power says no more than before
    enough = gate_budget.at_budget(0.02, 0.025, 0.06, p.needed)
    assert enough.power >= 0.8 and enough.needed is None and "fixed-n design" in gate_budget.describe(enough)


def test_the_gate_plans_once_the_pilot_measured_the_discordance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    opts = GateOptions(tmp_path, margin=0.02, alpha=0.025, power=0.9, pilot=100)
    assert budget_plan(opts, 3000, Tally(c=2, b=1, z=47)) == (3000, None)  # pilot not done
    assert capsys.readouterr().err == ""
    budget, planned = budget_plan(opts, 3000, Tally(c=3, b=2, z=95))
    assert planned == gate_budget.plan(0.02, 0.025, 0.05, 0.9, limit=3000) and budget == planned.budget
    assert "discordance 5.0%" in capsys.readouterr().err
    # without --power the budget stays the suite's, and the plan says what it buys
    given = GateOptions(tmp_path, margin=0.02, alpha=0.025, discordance=0.04)
    budget, planned = budget_plan(given, 3000, Tally(0, 0, 0))
    assert budget == 3000 and planned is not None and 0.95 < planned.power < 1
