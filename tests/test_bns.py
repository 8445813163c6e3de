"""BNS (Bespoke Non-Stationary solvers): untrained it is Euler, or the paper's RK-Midpoint in flow
coordinates (against a loop written out here in z = x/(1 + σ), t = 1/(1 + σ)); its parameters
are the paper's count; a short fit moves it and lowers the endpoint error on unseen seeds; it
travels through a checkpoint; bad settings are one line; `spanlift solvers` lists it."""

import pytest
import torch

from spanlift.cli import main
from spanlift.errors import SettingsError
from spanlift.platform.fitting.fit import FitSettings, fit
from spanlift.solvers import NFECounter, SolverSpec, build_solver, read_checkpoint, save_solver
from spanlift.solvers.checkpoint import load_solver_state

from .conftest import noise_like


def build(backbone, nfe, schedule="edm", name="bns", **settings):
    spec = SolverSpec(name, nfe, schedule, settings)
    return build_solver(spec, backbone.sigma_min, backbone.sigma_max, 1)


def endpoint(solver, backbone, x):
    with torch.no_grad():
        return solver(backbone.denoise, x)


@pytest.mark.parametrize(
    ("nfe", "schedule", "afs"),
    [(1, "edm", False), (3, "edm", False), (4, "logsnr", True), (5, "edm_to_zero", False)],
)
def test_untrained_bns_is_euler_exactly(gmm, nfe, schedule, afs):
    """γ = 0 and w = I: each step adds 0·x_0/σ_0 and 0·d_j to h_i d_i, which float rounding
    leaves exact, on the same grid (the learned grid starts at the schedule's)."""
    x = gmm.prior(noise_like(gmm, 4))
    bns = build(gmm, nfe, schedule, afs=afs)
    euler = build(gmm, nfe, schedule, name="euler", afs=afs)
    assert torch.equal(endpoint(bns, gmm, x), endpoint(euler, gmm, x))


def flow_midpoint(backbone, x, sigmas):
    """The paper's RK-Midpoint in flow coordinates t = 1/(1 + σ), z = t x, u = D − d, on the
    coarse grid `sigmas`, midpoints at t_m = (t_k + t_{k+1})/2."""

    def velocity(z, t):
        sigma = 1 / t - 1
        state = z / t
        denoised = backbone.denoise(state, sigma)
        return denoised - (state - denoised) / sigma

    t = 1 / (1 + sigmas)
    z = t[0] * x
    for k in range(len(sigmas) - 1):
        t_mid = (t[k] + t[k + 1]) / 2
        z_mid = z + (t_mid - t[k]) * velocity(z, t[k])
        z = z + (t[k + 1] - t[k]) * velocity(z_mid, t_mid)
    return z / t[-1]


@pytest.mark.parametrize(("nfe", "schedule"), [(2, "edm"), (6, "flow"), (4, "edm_to_zero")])
def test_untrained_midpoint_bns_is_the_flow_rk_midpoint(gmm64, nfe, schedule):
    """Init `midpoint`: NFE/2 RK-Midpoint steps over every other point of the schedule's grid,
    written as NS rows; equal to the loop above to float64 rounding (measured ≤ 1.1e-12), with NFE evaluations."""
    x = gmm64.prior(noise_like(gmm64, 4, dtype=torch.float64))
    bns = build(gmm64, nfe, schedule, init="midpoint")
    coarse = build(gmm64, nfe, schedule, name="euler").sigmas[::2]
    torch.testing.assert_close(bns.sigmas[::2].detach(), coarse, atol=0, rtol=1e-14)
    counter = NFECounter(gmm64.denoise)
    with torch.no_grad():
        out = bns(counter, x)
        reference = flow_midpoint(gmm64, x, coarse)
    assert counter.calls == nfe == bns.nfe
    torch.testing.assert_close(out, reference, atol=1e-11, rtol=1e-11)


def ns_parameter_count(steps: int) -> int:
    """Counted off the NS definition: the times t_0 … t_n, and per step i a scalar a_i (on x_0)
    and b_i ∈ R^{i+1} (on u_0 … u_i)."""
    return (steps + 1) + sum(1 + (i + 1) for i in range(steps))


@pytest.mark.parametrize("steps", range(1, 9))
def test_parameters_are_the_papers_count(gmm, steps):
    """p = n(n + 5)/2 + 1 (169 at n = 16, the paper's "< 200"). spanlift holds the n + 1 times as
    σ_0 … σ_n with both ends fixed, learned through n grid logits: one trainable scalar fewer."""
    assert ns_parameter_count(steps) == steps * (steps + 5) // 2 + 1
    bns = build(gmm, steps)
    sizes = {name: p.numel() for name, p in bns.named_parameters()}
    assert sizes == {
        "grid.logits": steps,
        "start_weights": steps,
        "derivative_weights": steps * (steps + 1) // 2,
    }
    held = len(bns.sigmas) + sizes["start_weights"] + sizes["derivative_weights"]
    assert held == ns_parameter_count(steps)
    assert sum(sizes.values()) == ns_parameter_count(steps) - 1


def test_a_short_fit_moves_it_and_lowers_the_endpoint_error(gmm, gmm_teacher):
    train, test = gmm_teacher
    bns = build(gmm, 4)
    before = {k: v.detach().clone() for k, v in bns.named_parameters()}
    x = gmm.prior(test.noise)
    error = (endpoint(bns, gmm, x) - test.endpoints).square().mean()
    settings = FitSettings(iterations=30, batch_size=32, lr=1e-2, warmup=5, validation=0.0)
    fit(bns, gmm, train, settings, progress=False)
    for name, value in bns.named_parameters():
        assert not torch.equal(value, before[name]), f"{name} did not move"
    fitted = (endpoint(bns, gmm, x) - test.endpoints).square().mean()
    assert fitted < 0.7 * error, (fitted, error)


def test_checkpoint_round_trip(gmm, tmp_path):
    trained = build(gmm, 4, init="midpoint")
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator, dtype=p.dtype))
    path = save_solver(tmp_path / "solver.pt", trained)
    spec = SolverSpec.from_dict(read_checkpoint(path)["spec"])
    reloaded = build_solver(spec, gmm.sigma_min, gmm.sigma_max, 1)
    reloaded.load_state_dict(load_solver_state(path, expected="bns"))
    for key, value in trained.state_dict().items():
        assert torch.equal(reloaded.state_dict()[key], value), key
    x = gmm.prior(noise_like(gmm, 2))
    assert torch.equal(endpoint(reloaded, gmm, x), endpoint(trained, gmm, x))


@pytest.mark.parametrize(
    ("nfe", "settings", "words"),
    [
        (4, {"init": "heun"}, "bns init must be one of euler, midpoint, got 'heun'"),
        (3, {"init": "midpoint"}, "needs an even number of steps; nfe gives 3"),
    ],
)
def test_bad_settings_are_one_line(gmm, nfe, settings, words):
    with pytest.raises(SettingsError, match=words):
        build(gmm, nfe, **settings)


def test_listed_as_written_from_the_paper(capsys):
    assert main(["solvers"]) == 0
    out = capsys.readouterr().out
    assert "cites: Shaul et al., ICML 2024 (BNS)" in out
    assert "reference: no public code; written from the paper (arXiv 2403.01329)" in out
