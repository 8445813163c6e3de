"""DPM-Solver-v3 against its authors' code (tests/fixtures/dpm_solver_v3_reference.json: their
sampler and EMS script run on the Gaussian mixture), and its statistics' guards and cache."""

import json
from pathlib import Path

import pytest
import torch

from spanlift.backbones import load_backbone
from spanlift.errors import SettingsError
from spanlift.platform.sampling.model_statistics import model_statistics
from spanlift.platform.sampling.teacher import load_or_generate, read_teacher, teacher_folder
from spanlift.solvers import SOLVERS, SolverSpec, build_solver
from spanlift.solvers.dpm_solver_v3 import Tables
from spanlift.solvers.model_statistics import (
    ModelStatistics,
    diagonal,
    estimate_statistics,
    f_and_derivative,
    regression,
    smoothed_derivative,
    statistics_grid,
)
from spanlift.solvers.schedules import SCHEDULES

REFERENCE = json.loads(
    (Path(__file__).parent / "fixtures/dpm_solver_v3_reference.json").read_text()
)
SIZE = REFERENCE["mixture"]["size"]
SHAPE = (1, SIZE, SIZE)


def mixture(dtype: torch.dtype) -> torch.nn.Module:
    """The mixture with the parameters the reference ran with."""
    gmm = load_backbone("gmm", size=SIZE).to(dtype)
    with torch.no_grad():
        for name in ("means", "variances", "log_weights"):
            getattr(gmm, name).copy_(torch.tensor(REFERENCE["mixture"][name], dtype=dtype))
    return gmm


def their_statistics() -> ModelStatistics:
    ems = REFERENCE["ems"]
    lam = statistics_grid(ems["sigma_min"], ems["sigma_max"], ems["n_timesteps"])
    rows = (torch.tensor(ems[k], dtype=torch.float64).reshape(-1, *SHAPE) for k in "lsb")
    return ModelStatistics(lam, *rows)


def solver_for(steps: str, **settings) -> torch.nn.Module:
    run = REFERENCE["sampling"][steps]["settings"]
    sigmas = SCHEDULES.get("logsnr")(int(steps), 0.002, 80.0)
    solver = SOLVERS.get("dpm_solver_v3")(
        sigmas,
        order=run["order"],
        predictor_pseudo=run["p_pseudo"],
        use_corrector=run["use_corrector"],
        corrector_pseudo=run["c_pseudo"],
        lower_order_final=run["lower_order_final"],
        **settings,
    )
    solver.use_statistics(their_statistics())
    return solver


@pytest.mark.parametrize("steps", ["5", "6", "8"])
def test_endpoints_match_the_authors_sampler(steps):
    """float64 throughout (their run with float64 statistics and step times): rounding only;
    their code as published rounds the λ grid and step times to float32: within 1e-6."""
    gmm, run = mixture(torch.float64), REFERENCE["sampling"][steps]
    noise = torch.tensor(REFERENCE["noise"], dtype=torch.float64).reshape(-1, *SHAPE)
    out = solver_for(steps)(gmm.denoise, 80.0 * noise).reshape(len(noise), -1)
    exact = torch.tensor(run["endpoints"], dtype=torch.float64)
    published = torch.tensor(run["endpoints_published_precision"], dtype=torch.float64)
    assert (out - exact).abs().max() < 1e-11
    assert (out - published).abs().max() < 1e-6
    assert solver_for(steps).nfe == int(steps)


def test_coefficients_match_the_authors():
    """e^{L_s−L_t}, I_t − I_s, C_t − C_s − B_s(I_t − I_s) and E_k of every step, as their
    DPM_Solver_v3 computed them."""
    for run in REFERENCE["sampling"].values():
        tab = Tables(their_statistics(), -torch.tensor(run["sigmas"], dtype=torch.float64).log())
        assert tab.node == run["indexes"]
        for c in run["coefficients"]:
            s, t = c["from"], c["to"]
            mine = {
                "exp_L": (tab.L[s] - tab.L[t]).exp(),
                "I": tab.I[t] - tab.I[s],
                "C": tab.C[t] - tab.C[s] - tab.B[s] * (tab.I[t] - tab.I[s]),
            }
            for name, value in mine.items():
                theirs = torch.tensor(c[name], dtype=torch.float64)
                assert torch.allclose(value.flatten(), theirs, rtol=1e-10, atol=1e-9), name
        for h in run["high_order"]:
            value = tab.high_order(h["from"], h["to"], h["order"] - 1).flatten()
            assert torch.allclose(value, torch.tensor(h["value"], dtype=torch.float64), rtol=1e-12)


def test_statistics_within_the_authors_run_to_run_spread():
    """l, s, b at three nodes from the same samples and fresh noise, against their script's
    first run, within 2.5× the spread between their two runs (pooled over those nodes)."""
    ems, gmm = REFERENCE["ems"], mixture(torch.float32)
    samples = gmm.sample_data(ems["samples"], torch.Generator().manual_seed(ems["data_seed"]))
    theirs = their_statistics()
    l_d = smoothed_derivative(theirs.l, theirs.lam)
    generator, nodes = torch.Generator().manual_seed(5), [10, 60, 110]
    mine = {"l": [], "s": [], "b": []}
    for j in nodes:
        lam = float(theirs.lam[j])
        mine["l"].append(diagonal(gmm.denoise, samples, lam, generator, len(samples)))
        f, f_d = f_and_derivative(gmm.denoise, samples, lam, theirs.l[j], l_d[j], generator, 4096)
        for name, value in zip("sb", regression(f, f_d), strict=True):
            mine[name].append(value)
    for name, values in mine.items():
        theirs_rows = getattr(theirs, name)[nodes].reshape(len(nodes), -1)
        error = (torch.stack(values).reshape(len(nodes), -1) - theirs_rows).pow(2).mean().sqrt()
        spread = torch.tensor(ems["spread_rms_per_node"][name])[nodes].pow(2).mean().sqrt()
        assert error < 2.5 * spread, (name, float(error), float(spread))


def test_a_constant_dimension_gets_zero_slope():
    """Data N(0, 1) in one dimension and the constant 0.5 in another (exact denoisers): the
    constant one has l = 1, f = −0.5 without spread, so s = 0 and b = E[f']; all finite."""

    def denoiser(x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        s2 = sigma.reshape(-1, 1) ** 2
        return torch.cat([x[:, :1] / (1 + s2), torch.full_like(x[:, 1:], 0.5)], dim=1)

    normal = torch.randn(256, 1, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    samples = torch.cat([normal, torch.full_like(normal, 0.5)], dim=1)
    stats = estimate_statistics(denoiser, samples, 0.002, 80.0, timesteps=6, seed=1)
    assert all(torch.isfinite(t).all() for t in (stats.l, stats.s, stats.b))
    assert torch.allclose(stats.l[:, 1], torch.ones(7, dtype=torch.float64))
    assert (stats.s[:, 1] == 0).all()
    # the Gaussian dimension: l = 1 − 1/(1+σ²) exactly (J_D is diagonal, Hutchinson is exact)
    sigma2 = (-2 * stats.lam).exp()
    assert torch.allclose(stats.l[:, 0], sigma2 / (1 + sigma2))


def test_degenerated_first_order_is_ddim():
    """l = 1, s = b = 0, order 1: DDIM (Euler in σ-form) up to the trapezoid rule on 1200 nodes."""
    gmm = mixture(torch.float64)
    sigmas = SCHEDULES.get("logsnr")(6, 0.002, 80.0)
    v3 = SOLVERS.get("dpm_solver_v3")(sigmas, order=1, use_corrector=False, degenerated=True)
    euler = SOLVERS.get("euler")(sigmas)
    x = 80.0 * torch.randn(
        4, *SHAPE, generator=torch.Generator().manual_seed(2), dtype=torch.float64
    )
    assert (v3(gmm.denoise, x) - euler(gmm.denoise, x)).abs().max() < 3e-5


def test_refusals():
    with pytest.raises(SettingsError, match="σ = 0"):
        build_solver(SolverSpec("dpm_solver_v3", 5, "edm_to_zero"), 0.002, 80.0, 1)
    solver = build_solver(SolverSpec("dpm_solver_v3", 5, "logsnr"), 0.002, 80.0, 1)
    with pytest.raises(SettingsError, match="no model statistics"):
        solver(lambda x, s: x, torch.zeros(1, *SHAPE))
    wide = build_solver(SolverSpec("dpm_solver_v3", 5, "logsnr"), 0.001, 80.0, 1)
    wide.use_statistics(their_statistics())
    with pytest.raises(SettingsError, match="leaves its statistics"):
        wide(lambda x, s: x, torch.zeros(1, *SHAPE))
    with pytest.raises(SettingsError, match="'auto'"):
        build_solver(SolverSpec("dpm_solver_v3", 5, "logsnr", {"use_corrector": 1}), 0.002, 80.0, 1)


def test_statistics_cached_beside_the_teacher_and_checkpointed(tmp_path):
    """Estimated once, written as a verified entry next to the teacher's, read by the next solver
    (another NFE); a solver's state carries them to a fresh one."""
    gmm = load_backbone("gmm", size=2)
    load_or_generate(tmp_path, gmm, range(16), progress=False)
    teacher = read_teacher(
        teacher_folder(tmp_path, gmm, SolverSpec("ipndm", 35, "edm", {"order": 4}), range(16))
    )
    request = {"timesteps": 4, "samples": 8, "seed": 0}
    first = model_statistics(gmm, teacher, request)
    entries = sorted(p.name.split("-")[0] for p in tmp_path.iterdir())
    assert entries == ["ems", "teacher"]
    again = model_statistics(gmm, teacher, request)
    assert torch.equal(first.s, again.s) and torch.equal(first.lam, again.lam)
    solver = build_solver(SolverSpec("dpm_solver_v3", 5, "logsnr"), 0.002, 80.0, 1)
    solver.use_statistics(their_statistics())
    fresh = build_solver(SolverSpec("dpm_solver_v3", 5, "logsnr"), 0.002, 80.0, 1)
    fresh.load_state_dict(solver.state_dict())
    assert fresh.statistics_request() is None and torch.equal(fresh.ems_b, solver.ems_b)
    x = torch.randn(2, *SHAPE, dtype=torch.float64) * 80
    denoiser = mixture(torch.float64).denoise
    assert torch.equal(fresh(denoiser, x), solver(denoiser, x))
