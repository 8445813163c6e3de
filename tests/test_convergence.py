"""Convergence order on an ODE with a known solution.

Data N(μ, s² I) has the exact denoiser D(x, σ) = μ + s²/(s² + σ²)(x − μ), and the probability-flow
ODE dx/dσ = (x − D)/σ has the solution x(σ) = μ + sqrt(s² + σ²)/sqrt(s² + σ_0²) (x(σ_0) − μ).
Steps are uniform in σ (the `time` schedule), where Adams–Bashforth weights are exact.
"""

import numpy as np
import pytest
import torch

from spanlift.solvers import Point, SolverSpec, build_solver

MU, S2 = 0.3, 0.25
SIGMA_MAX, SIGMA_MIN = 2.0, 0.5


def denoise(x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    return MU + S2 / (S2 + sigma**2) * (x - MU)


def exact(x0: torch.Tensor, sigma0: float, sigma: float) -> torch.Tensor:
    return MU + np.sqrt(S2 + sigma**2) / np.sqrt(S2 + sigma0**2) * (x0 - MU)


def start() -> torch.Tensor:
    return torch.linspace(-2, 2, 16, dtype=torch.float64).reshape(4, 1, 2, 2)


def solver_for(name: str, nfe: int, settings: dict):
    return build_solver(SolverSpec(name, nfe, "time", settings), SIGMA_MIN, SIGMA_MAX, channels=1)


def observed_order(steps: list[int], errors: list[float]) -> float:
    """Slope of log(error) against log(1/h): p in error ≈ C h^p."""
    return float(np.polyfit(np.log(steps), -np.log(errors), 1)[0])


def global_error(name: str, nfe: int, settings: dict) -> float:
    x0 = start()
    return (
        (solver_for(name, nfe, settings)(denoise, x0) - exact(x0, SIGMA_MAX, SIGMA_MIN))
        .abs()
        .max()
        .item()
    )


@pytest.mark.parametrize(
    ("name", "settings", "order"),
    [("euler", {}, 1), ("heun", {}, 2), ("ipndm", {"order": 2}, 2)],
)
def test_global_order(name, settings, order):
    steps = [8, 16, 32, 64]
    nfes = [2 * n - 1 if name == "heun" else n for n in steps]
    errors = [global_error(name, nfe, settings) for nfe in nfes]
    assert observed_order(steps, errors) == pytest.approx(order, abs=0.25)


@pytest.mark.parametrize("order", [3, 4])
def test_ipndm_warm_start_limits_global_order_to_two(order):
    """The lower-order warm-start steps leave an O(h²) error, so a full rollout is order 2."""
    nfes = [16, 32, 64, 128]
    errors = [global_error("ipndm", n, {"order": order}) for n in nfes]
    assert observed_order(nfes, errors) >= 2 - 0.25


def local_error(name: str, settings: dict, steps: int, i: int) -> float:
    """Error of step i taken from the exact state with an exact history (no warm-start error)."""
    solver = solver_for(name, steps, settings)
    sigmas, x0 = solver.sigmas, start()
    history = []
    for j in range(i, max(-1, i - solver.buffer_size), -1):
        xj = exact(x0, SIGMA_MAX, sigmas[j].item())
        d = denoise(xj, sigmas[j])
        history.append(Point(sigmas[j], xj, d, (xj - d) / sigmas[j]))
    x_i = history[0].x
    x_next = x_i + (sigmas[i + 1] - sigmas[i]) * solver.direction(i, x_i, history, denoise)
    return (x_next - exact(x0, SIGMA_MAX, sigmas[i + 1].item())).abs().max().item()


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_ipndm_local_error_is_order_k_plus_one(order):
    """With exact starting values, Adams–Bashforth of order k has local error O(h^(k+1))."""
    steps = [16, 32, 64, 128]
    errors = [local_error("ipndm", {"order": order}, n, i=n // 2) for n in steps]
    assert observed_order(steps, errors) == pytest.approx(order + 1, abs=0.3)


def test_dpm_solver_pp_2m_local_error_is_third_order():
    steps = [16, 32, 64, 128]
    settings = {"order": 2, "lower_order_final": False}
    errors = [local_error("dpm_solver_pp", settings, n, i=n // 2) for n in steps]
    assert observed_order(steps, errors) == pytest.approx(3, abs=0.3)


@pytest.mark.parametrize("order", [1, 2, 3])
def test_unipc_corrector_raises_the_order_by_one(order):
    """UniC-p makes UniPC of order p + 1: local error O(h^(p+2))."""
    steps = [16, 32, 64, 128]
    settings = {"order": order, "lower_order_final": False}
    errors = [local_error("unipc", settings, n, i=n // 2) for n in steps]
    assert observed_order(steps, errors) >= order + 2 - 0.3
