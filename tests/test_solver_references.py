"""iPNDM, DPM-Solver++ and UniPC against independent NumPy implementations written from the papers.

The references share nothing with spanlift but the frozen model: their own loops, their own weight
derivations (iPNDM's Adams–Bashforth weights come from integrating Lagrange polynomials), and the
papers' structure (UniPC corrects x_{i+1} right after evaluating the model there).
"""

import math

import numpy as np
import pytest
import torch
from numpy.polynomial import polynomial as P

from spanlift.solvers import SolverSpec, build_solver
from spanlift.solvers.schedules import SCHEDULES

from .conftest import noise_like


def model_np(backbone):
    def denoise(x: np.ndarray, sigma: float) -> np.ndarray:
        with torch.no_grad():
            return backbone.denoise(
                torch.from_numpy(x), torch.tensor(sigma, dtype=torch.float64)
            ).numpy()

    return denoise


def adams_bashforth(p: int) -> np.ndarray:
    """w_j = ∫_0^1 ℓ_j(s) ds for the Lagrange basis on nodes s_j = −j, j = 0 … p−1."""
    nodes = -np.arange(p, dtype=float)
    weights = []
    for j in range(p):
        basis = np.array([1.0])
        for m in range(p):
            if m != j:
                basis = P.polymul(basis, np.array([-nodes[m], 1.0]) / (nodes[j] - nodes[m]))
        antiderivative = P.polyint(basis)
        weights.append(P.polyval(1.0, antiderivative) - P.polyval(0.0, antiderivative))
    return np.array(weights)


def ipndm_reference(denoise, x, sigmas, order):
    derivatives = []
    for i in range(len(sigmas) - 1):
        derivatives.insert(0, (x - denoise(x, sigmas[i])) / sigmas[i])
        p = min(i + 1, order)
        step = sum(w * d for w, d in zip(adams_bashforth(p), derivatives[:p], strict=True))
        x = x + (sigmas[i + 1] - sigmas[i]) * step
    return x


def dpmpp_reference(denoise, x, sigmas, order, lower_order_final):
    """DPM-Solver++ multistep, α_t = 1, λ = −log σ (Lu et al. 2022, Alg. 2 and the 3rd-order update)."""
    n = len(sigmas) - 1
    lam = -np.log(sigmas)
    outputs = []
    for i in range(n):
        outputs.append(denoise(x, sigmas[i]))
        p = min(order, i + 1, n - i) if lower_order_final else min(order, i + 1)
        h = lam[i + 1] - lam[i]
        phi1 = math.expm1(-h)
        x_next = sigmas[i + 1] / sigmas[i] * x - phi1 * outputs[i]
        if p == 2:
            r = (lam[i] - lam[i - 1]) / h
            x_next = sigmas[i + 1] / sigmas[i] * x - phi1 * (
                (1 + 1 / (2 * r)) * outputs[i] - 1 / (2 * r) * outputs[i - 1]
            )
        elif p == 3:
            r0, r1 = (lam[i] - lam[i - 1]) / h, (lam[i - 1] - lam[i - 2]) / h
            d1_0 = (outputs[i] - outputs[i - 1]) / r0
            d1_1 = (outputs[i - 1] - outputs[i - 2]) / r1
            d1 = d1_0 + r0 / (r0 + r1) * (d1_0 - d1_1)
            d2 = (d1_0 - d1_1) / (r0 + r1)
            phi2 = phi1 / h + 1
            phi3 = phi2 / h - 0.5
            x_next = x_next + phi2 * d1 - phi3 * d2
        x = x_next
    return x


def unipc_reference(denoise, x, sigmas, order, lower_order_final):
    """UniPC-bh2, data prediction (Zhao et al. 2023): predict, evaluate, correct, keep the output."""
    n = len(sigmas) - 1
    lam = -np.log(sigmas)
    outputs = [denoise(x, sigmas[0])]
    for i in range(n):
        p = min(order, i + 1, n - i) if lower_order_final else min(order, i + 1)
        h = lam[i + 1] - lam[i]
        hh = -h
        rks = [(lam[i - k] - lam[i]) / h for k in range(1, p)] + [1.0]
        d1s = [(outputs[i - k] - outputs[i]) / rks[k - 1] for k in range(1, p)]
        b_h = math.expm1(hh)
        rows, b = [], []
        h_phi_k, fact = math.expm1(hh) / hh - 1, 1
        for k in range(1, p + 1):
            rows.append(np.array(rks) ** (k - 1))
            b.append(h_phi_k * fact / b_h)
            fact *= k + 1
            h_phi_k = h_phi_k / hh - 1 / fact
        rows, b = np.array(rows), np.array(b)
        x_base = sigmas[i + 1] / sigmas[i] * x - math.expm1(hh) * outputs[i]
        if p == 1:
            rho_p, rho_c = np.zeros(0), np.array([0.5])
        else:
            rho_p = np.array([0.5]) if p == 2 else np.linalg.solve(rows[:-1, :-1], b[:-1])
            rho_c = np.linalg.solve(rows, b)
        x_pred = x_base - b_h * sum(
            (r * d for r, d in zip(rho_p, d1s, strict=True)), np.zeros_like(x)
        )
        if i == n - 1:
            return x_pred
        output_next = denoise(x_pred, sigmas[i + 1])
        corr = sum((r * d for r, d in zip(rho_c[:-1], d1s, strict=True)), np.zeros_like(x))
        x = x_base - b_h * (corr + rho_c[-1] * (output_next - outputs[i]))
        outputs.append(output_next)
    return x


def spanlift_rollout(backbone, name, nfe, schedule, settings, noise):
    solver = build_solver(
        SolverSpec(name, nfe, schedule, settings), backbone.sigma_min, backbone.sigma_max, 1
    )
    with torch.no_grad():
        return solver(backbone.denoise, backbone.prior(noise)).numpy()


def sigma_grid(backbone, schedule, steps):
    return SCHEDULES.get(schedule)(steps, backbone.sigma_min, backbone.sigma_max).numpy()


CASES = [(schedule, nfe) for schedule in ("edm", "logsnr") for nfe in (3, 5, 8)]


def assert_close(ours, reference):
    scale = np.abs(reference).max()
    assert np.abs(ours - reference).max() <= 1e-8 * scale


@pytest.mark.parametrize("order", [1, 2, 3, 4])
@pytest.mark.parametrize(("schedule", "nfe"), CASES)
def test_ipndm_matches_lagrange_adams_bashforth(gmm64, order, schedule, nfe):
    noise = noise_like(gmm64, 8, dtype=torch.float64)
    ours = spanlift_rollout(gmm64, "ipndm", nfe, schedule, {"order": order}, noise)
    reference = ipndm_reference(
        model_np(gmm64), gmm64.prior(noise).numpy(), sigma_grid(gmm64, schedule, nfe), order
    )
    assert_close(ours, reference)


def test_lagrange_weights_are_the_classical_ones():
    assert np.allclose(adams_bashforth(3), [23 / 12, -16 / 12, 5 / 12])
    assert np.allclose(adams_bashforth(4), [55 / 24, -59 / 24, 37 / 24, -9 / 24])


@pytest.mark.parametrize("lower_order_final", [True, False])
@pytest.mark.parametrize("order", [2, 3])
@pytest.mark.parametrize(("schedule", "nfe"), CASES)
def test_dpm_solver_pp_matches_reference(gmm64, order, lower_order_final, schedule, nfe):
    noise = noise_like(gmm64, 8, dtype=torch.float64)
    settings = {"order": order, "lower_order_final": lower_order_final}
    ours = spanlift_rollout(gmm64, "dpm_solver_pp", nfe, schedule, settings, noise)
    x = gmm64.prior(noise).numpy()
    reference = dpmpp_reference(
        model_np(gmm64), x, sigma_grid(gmm64, schedule, nfe), order, lower_order_final
    )
    assert_close(ours, reference)


@pytest.mark.parametrize("lower_order_final", [True, False])
@pytest.mark.parametrize("order", [1, 2, 3])
@pytest.mark.parametrize(("schedule", "nfe"), CASES)
def test_unipc_matches_reference(gmm64, order, lower_order_final, schedule, nfe):
    noise = noise_like(gmm64, 8, dtype=torch.float64)
    settings = {"order": order, "lower_order_final": lower_order_final}
    ours = spanlift_rollout(gmm64, "unipc", nfe, schedule, settings, noise)
    x = gmm64.prior(noise).numpy()
    reference = unipc_reference(
        model_np(gmm64), x, sigma_grid(gmm64, schedule, nfe), order, lower_order_final
    )
    assert_close(ours, reference)


def test_euler_is_first_order_dpm_solver_pp(gmm64):
    """In σ-form DDIM, Euler and first-order DPM-Solver++ are the same update."""
    noise = noise_like(gmm64, 8, dtype=torch.float64)
    euler = spanlift_rollout(gmm64, "euler", 5, "edm", {}, noise)
    x = gmm64.prior(noise).numpy()
    reference = dpmpp_reference(model_np(gmm64), x, sigma_grid(gmm64, "edm", 5), 1, False)
    assert_close(euler, reference)
