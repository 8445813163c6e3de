"""SpanLift diagnostics: the out-of-span ratio against NumPy least squares, and per-step records."""

import numpy as np
import pytest
import torch

from spanlift.errors import SettingsError
from spanlift.platform.analysis.out_of_span import update_out_of_span
from spanlift.platform.evaluation.metrics.diagnostics import (
    diagnostics_table,
    out_of_span_ratio,
    plot_diagnostics,
    spanlift_diagnostics,
)
from spanlift.solvers import SolverSpec, build_solver
from spanlift.solvers.schedules import SCHEDULES


@pytest.fixture
def buffer() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(4, 2, 5, 5, generator=g, dtype=torch.float64) for _ in range(3)]


def test_correction_inside_the_span_has_ratio_zero(buffer) -> None:
    inside = 0.7 * buffer[0] - 2.0 * buffer[1] + 0.1 * buffer[2]
    assert out_of_span_ratio(inside, buffer).max() < 1e-10


def test_correction_orthogonal_to_the_span_has_ratio_one(buffer) -> None:
    g = torch.Generator().manual_seed(1)
    v = torch.randn(4, 50, generator=g, dtype=torch.float64)
    basis = torch.stack([b.flatten(1) for b in buffer], dim=2)
    coefficients = torch.linalg.lstsq(basis, v[:, :, None]).solution
    orthogonal = (v - (basis @ coefficients)[:, :, 0]).reshape(4, 2, 5, 5)
    assert torch.allclose(out_of_span_ratio(orthogonal, buffer), torch.ones(4, dtype=torch.float64))


def test_ratio_equals_numpy_least_squares_residual(buffer) -> None:
    v = torch.randn(4, 2, 5, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    ours = out_of_span_ratio(v, buffer).numpy()
    for n in range(4):
        a = np.stack([b[n].flatten().numpy() for b in buffer], axis=1)
        target = v[n].flatten().numpy()
        residual = target - a @ np.linalg.lstsq(a, target, rcond=None)[0]
        assert ours[n] == pytest.approx(np.linalg.norm(residual) / np.linalg.norm(target), 1e-9)


def test_rank_deficient_buffer_spans_only_its_directions(buffer) -> None:
    d = buffer[0]
    spanning = [d, d, torch.zeros_like(d)]  # an early step: one distinct derivative
    assert out_of_span_ratio(3 * d, spanning).max() < 1e-10
    assert out_of_span_ratio(buffer[1], spanning).min() > 0.5


def spanlift(gmm, beta: float):
    spec = SolverSpec("spanlift", 4, settings={"base": "ipndm", "operator": "pointwise"})
    torch.manual_seed(0)  # the operator's initial weights
    solver = build_solver(spec, gmm.sigma_min, gmm.sigma_max, gmm.shape[0])
    with torch.no_grad():
        solver.beta.fill_(beta)
        for p in solver.operator.parameters():  # an operator that is not the zero map
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    return solver


def test_per_step_records_follow_beta(gmm, tmp_path) -> None:
    noise = torch.randn(32, *gmm.shape, generator=torch.Generator().manual_seed(0))
    untrained = spanlift_diagnostics(spanlift(gmm, 0.0), gmm, noise)
    assert [s.step for s in untrained] == [0, 1, 2, 3]
    assert all(s.relative_magnitude == 0 for s in untrained)  # β = 0: SpanLift is its base
    half = spanlift_diagnostics(spanlift(gmm, 0.5), gmm, noise)
    full = spanlift_diagnostics(spanlift(gmm, 1.0), gmm, noise)
    assert full[0].relative_magnitude == pytest.approx(2 * half[0].relative_magnitude, rel=1e-5)
    assert full[0].out_of_span == pytest.approx(half[0].out_of_span, rel=1e-6)  # β scales only
    assert all(0 <= s.out_of_span <= 1 + 1e-9 for s in full)
    assert list(diagnostics_table(full).columns) == [
        "step",
        "sigma",
        "out_of_span",
        "relative_magnitude",
    ]
    assert plot_diagnostics(full, tmp_path / "d.png").read_bytes()[:4] == b"\x89PNG"


def test_diagnostics_need_a_spanlift(gmm) -> None:
    euler = build_solver(SolverSpec("euler", 3), gmm.sigma_min, gmm.sigma_max, gmm.shape[0])
    with pytest.raises(SettingsError, match="diagnostics need a SpanLift solver, got euler"):
        spanlift_diagnostics(euler, gmm, torch.zeros(2, *gmm.shape))


def moved_grid(solver) -> torch.Tensor:
    """Move a learned grid's logits off their initial values; the solver's σ_0 … σ_N after."""
    grid = solver.grid
    noise = torch.randn(grid.logits.shape, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        grid.logits.add_(0.5 * noise.to(grid.logits.dtype))
    return grid().detach()


@pytest.mark.parametrize(
    ("name", "settings"),
    [("ld3", {"base": "ipndm"}), ("s4s_alt", {}), ("spanlift", {"base": "s4s_alt"})],
)
def test_per_step_sigma_is_the_learned_grid(gmm, name, settings) -> None:
    """The span diagnostics and `analyze out-of-span` report the σ a learned grid steps on, not
    the schedule's grid it started from."""
    solver = build_solver(SolverSpec(name, 4, settings=settings), gmm.sigma_min, gmm.sigma_max, 1)
    learned = moved_grid(solver if name == "s4s_alt" else solver.base)  # who holds it
    initial = SCHEDULES.get("edm")(4, gmm.sigma_min, gmm.sigma_max)
    assert not torch.allclose(learned, initial), "the perturbation must move the grid"
    noise = torch.randn(8, *gmm.shape, generator=torch.Generator().manual_seed(0))
    table = update_out_of_span(solver, gmm, noise)
    assert table["sigma"].tolist() == pytest.approx(learned[:-1].tolist(), rel=1e-12)
    if name == "spanlift":
        steps = spanlift_diagnostics(solver, gmm, noise)
        assert [s.sigma for s in steps] == pytest.approx(learned[:-1].tolist(), rel=1e-12)
