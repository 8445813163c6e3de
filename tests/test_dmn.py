"""The `dmn` schedule (StepOptim) against its authors' code (DM-NonUniform `StepOptim`;
tests/fixtures/dmn_reference.json): their error bound at fixed points, their optimised grids."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from spanlift.errors import SettingsError
from spanlift.solvers import SolverSpec, build_solver
from spanlift.solvers.dmn import error_bound
from spanlift.solvers.schedules import SCHEDULES

REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "dmn_reference.json").read_text())


@pytest.mark.parametrize("case", REFERENCE["bound"]["cases"], ids=lambda c: f"N{c['steps']}")
def test_the_bound_equals_the_reference_objective(case):
    """At the ends their code computes (λ_N = −ln 0.002 to 2e-11: σ = sqrt(1 − α²) rounds)."""
    value = error_bound(np.array(case["inner"]), tuple(REFERENCE["bound"]["ends"]))
    assert value == pytest.approx(case["bound"], rel=1e-12)


@pytest.mark.parametrize("family", ["edm", "vp_linear"])
@pytest.mark.parametrize("steps", [5, 6])
def test_the_grid_equals_the_reference_optimiser(family, steps):
    """Same bound, same trust-constr from the same start: λ within 1e-6 (their start is a float32
    linspace, ours float64; measured gaps ≤ 7e-8)."""
    expected = torch.tensor(REFERENCE["grids"][family][str(steps)], dtype=torch.float64)
    sigma_max, sigma_min = math.exp(-expected[0]), math.exp(-expected[-1])
    sigmas = SCHEDULES.get("dmn")(steps, sigma_min, sigma_max)
    torch.testing.assert_close(-sigmas.log(), expected, rtol=0, atol=1e-6)
    assert sigmas[0] == sigma_max and sigmas[-1] == sigma_min


def test_a_solver_steps_on_it_and_bad_ranges_are_one_line():
    solver = build_solver(SolverSpec("dpm_solver_pp", 5, "dmn", {"order": 3}), 0.002, 80.0, 1)
    grid = solver.sigmas
    assert len(grid) == 6 and bool((grid[1:] < grid[:-1]).all())
    assert SCHEDULES.get("dmn")(1, 0.002, 80.0).tolist() == [80.0, 0.002]
    with pytest.raises(SettingsError, match="0 < sigma_min < sigma_max"):
        SCHEDULES.get("dmn")(4, 1.0, 0.5)


def test_importing_the_solvers_leaves_scipys_optimiser_to_the_first_dmn_grid():
    """Every spanlift process imports the solvers (trials, evaluators, each command): SciPy's
    optimiser, 0.2 s of an import, loads only when a DMN grid is first optimised."""
    code = "import sys, spanlift.solvers; print('scipy.optimize' in sys.modules)"
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert printed.returncode == 0 and printed.stdout.strip() == "False", printed.stderr
