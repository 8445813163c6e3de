"""AMED and EPD: untrained they are known analytic solvers, they spend the NFE they claim, their
learned parameters receive gradients, and bad settings are refused."""

import copy
import itertools

import pytest
import torch

from spanlift.errors import SettingsError, UnreachableNFEError
from spanlift.solvers import SOLVERS, NFECounter, SolverSpec, build_solver
from spanlift.solvers.ipndm import ADAMS_BASHFORTH

from .conftest import noise_like


def build(gmm, name, nfe, schedule="edm", **settings):
    spec = SolverSpec(name, nfe, schedule, settings)
    return build_solver(spec, gmm.sigma_min, gmm.sigma_max, 1)


def derivative(denoise, x, sigma):
    return (x - denoise(x, sigma)) / sigma


def midpoint_loop(denoise, sigmas, x, afs=False, r=(0.5,), c=1.0):
    """Written out: d_i, then the mean of d at s_k = σ_i^{1−r_k} σ_{i+1}^{r_k} reached by Euler with
    d_i; x_{i+1} = x_i + h_i c · mean_k d(x_{s_k}, s_k). A step to σ = 0 is Euler."""
    for i, (s, t) in enumerate(itertools.pairwise(sigmas)):
        d = x / (1 + s**2).sqrt() if afs and i == 0 else derivative(denoise, x, s)
        if t == 0:
            x = x + (t - s) * d
            continue
        points = [s ** (1 - rk) * t**rk for rk in r]
        mean = sum(derivative(denoise, x + (m - s) * d, m) for m in points) / len(points)
        x = x + (t - s) * c * mean
    return x


@pytest.mark.parametrize("afs", [False, True])
@pytest.mark.parametrize("schedule", ["edm", "edm_to_zero"])
def test_untrained_amed_is_the_geometric_midpoint_solver(gmm64, afs, schedule):
    solver = build(gmm64, "amed", 8 - afs - (schedule == "edm_to_zero"), schedule, afs=afs)
    x = gmm64.prior(noise_like(gmm64, 3, dtype=torch.float64))
    with torch.no_grad():
        got = solver(gmm64.denoise, x)
    want = midpoint_loop(gmm64.denoise, solver.sigmas, x, afs)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_amed_places_its_point_at_r_and_scales_by_c(gmm64):
    solver = build(gmm64, "amed", 6, r_init=0.3, scale_init=0.9)
    x = gmm64.prior(noise_like(gmm64, 3, dtype=torch.float64))
    with torch.no_grad():
        got = solver(gmm64.denoise, x)
    want = midpoint_loop(gmm64.denoise, solver.sigmas, x, r=(0.3,), c=0.9)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)  # r, c are float32


def test_default_epd_averages_two_points_in_one_call(gmm64):
    solver = build(gmm64, "epd", 6)
    x = gmm64.prior(noise_like(gmm64, 3, dtype=torch.float64))
    counter = NFECounter(gmm64.denoise)
    with torch.no_grad():
        got = solver(counter, x)
    want = midpoint_loop(gmm64.denoise, solver.sigmas, x, r=(1 / 3, 2 / 3))
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)  # r is a float32 sigmoid
    assert counter.calls == 6 == 2 * solver.num_steps


@pytest.mark.parametrize(
    "settings",
    [
        {"points": 1},
        {"points": 2, "r_init": [0.5, 0.5]},
        {"points": 3, "r_init": [0.5] * 3, "afs": True},
    ],
)
def test_untrained_epd_with_coinciding_points_equals_untrained_amed(gmm64, settings):
    nfe = 5 if settings.get("afs") else 6
    epd = build(gmm64, "epd", nfe, **settings)
    amed = build(gmm64, "amed", nfe, afs=settings.get("afs", False))
    x = gmm64.prior(noise_like(gmm64, 3, dtype=torch.float64))
    with torch.no_grad():
        torch.testing.assert_close(
            epd(gmm64.denoise, x), amed(gmm64.denoise, x), rtol=1e-10, atol=1e-10
        )


def interleaved_midpoints(sigmas):
    """σ_0, √(σ_0σ_1), σ_1, …, σ_N; no midpoint before a last σ = 0."""
    grid = []
    for s, t in itertools.pairwise(sigmas):
        grid += [s] if t == 0 else [s, (s * t).sqrt()]
    return torch.stack([*grid, sigmas[-1]])


PLUGIN_BASES = ["euler", "ipndm", "dyweight", "dlms", "dpm_solver_pp", "unipc"]
"""Every registered solver that spends one evaluation per step on the grid it is handed."""


@pytest.mark.parametrize("base", PLUGIN_BASES)
@pytest.mark.parametrize("afs", [False, True])
@pytest.mark.parametrize("schedule", ["edm", "edm_to_zero"])
def test_untrained_amed_plugin_is_its_base_on_the_midpoint_grid(gmm64, base, afs, schedule):
    nfe = 8 - afs - (schedule == "edm_to_zero")  # a last step to σ = 0 spends one evaluation
    plugin = build(gmm64, "amed_plugin", nfe, schedule, base=base, afs=afs)
    fine = interleaved_midpoints(plugin.sigmas)
    direct = SOLVERS.get(base)(fine, afs=afs)
    x = gmm64.prior(noise_like(gmm64, 3, dtype=torch.float64))
    with torch.no_grad():
        coarse = plugin.trajectory(gmm64.denoise, x)
        every = direct.trajectory(gmm64.denoise, x)
    on_coarse = [every[j - 1] for j in range(len(fine)) if fine[j] in plugin.sigmas[1:]]
    assert len(coarse) == plugin.num_steps == len(on_coarse)
    for got, want in zip(coarse, on_coarse, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_amed_plugin_scales_the_landing_sub_step(gmm64):
    """On Euler: x_s = x_i + (s_i − σ_i) d_i, then x_{i+1} = x_s + (σ_{i+1} − s_i) c d(x_s, s_i)."""
    solver = build(gmm64, "amed_plugin", 6, base="euler", r_init=0.3, scale_init=0.9)
    x = gmm64.prior(noise_like(gmm64, 3, dtype=torch.float64))
    with torch.no_grad():
        got = solver(gmm64.denoise, x)
    sigmas = solver.sigmas
    for s, t in itertools.pairwise(sigmas):
        m = s**0.7 * t**0.3
        x = x + (m - s) * derivative(gmm64.denoise, x, s)
        x = x + (t - m) * 0.9 * derivative(gmm64.denoise, x, m)
    torch.testing.assert_close(got, x, rtol=1e-6, atol=1e-6)


def test_untrained_epd_plugin_predicts_with_its_base(gmm64):
    """One point at r = 0.5, reached by iPNDM(2)'s direction over the grid derivatives."""
    solver = build(gmm64, "epd_plugin", 8, points=1, base_settings={"order": 2})
    sigmas, denoise = solver.sigmas, gmm64.denoise
    x = gmm64.prior(noise_like(gmm64, 3, dtype=torch.float64))
    with torch.no_grad():
        got = solver(denoise, x)
    derivatives = []
    for i, (s, t) in enumerate(itertools.pairwise(sigmas)):
        derivatives = [derivative(denoise, x, s), *derivatives][:2]
        weights = ADAMS_BASHFORTH[min(i + 1, 2) - 1]
        predicted = sum(w * d for w, d in zip(weights, derivatives, strict=False))
        m = (s * t).sqrt()
        x = x + (t - s) * derivative(denoise, x + (m - s) * predicted, m)
    torch.testing.assert_close(got, x, rtol=1e-10, atol=1e-10)


def nfe_cases():
    plain = [("amed", {}), ("epd", {}), ("epd", {"points": 3})]
    plugins = [
        (name, {"base": base}) for name in ("amed_plugin", "epd_plugin") for base in PLUGIN_BASES
    ]
    for afs in (False, True):
        for name, settings in plain:
            for nfe in (1, 3, 5) if afs else (2, 4, 6):
                yield name, nfe, {**settings, "afs": afs}
        for name, settings in plugins:
            yield name, 3 if afs else 4, {**settings, "afs": afs}


@pytest.mark.parametrize(("name", "nfe", "settings"), list(nfe_cases()))
def test_counted_nfe_is_two_per_step_minus_afs(gmm, name, nfe, settings):
    solver = build(gmm, name, nfe, **settings)
    counter = NFECounter(gmm.denoise)
    with torch.no_grad():
        solver(counter, gmm.prior(noise_like(gmm, 2)))
    assert counter.calls == nfe == solver.nfe == 2 * solver.num_steps - settings["afs"]


@pytest.mark.parametrize("name", ["amed", "amed_plugin", "epd", "epd_plugin"])
def test_a_last_step_to_zero_spends_one_evaluation(gmm, name):
    solver = build(gmm, name, 7, "edm_to_zero")
    counter = NFECounter(gmm.denoise)
    with torch.no_grad():
        trajectory = solver.trajectory(counter, gmm.prior(noise_like(gmm, 2)))
    assert counter.calls == solver.nfe == 7
    assert len(trajectory) == solver.num_steps == 4 and solver.sigmas[-1] == 0
    assert trajectory[-1].isfinite().all()


@pytest.mark.parametrize(
    ("name", "nfe", "settings"),
    [
        ("amed", 3, {}),
        ("amed", 4, {"afs": True}),
        ("epd_plugin", 5, {}),
        ("amed_plugin", 2, {"afs": True}),
    ],
)
def test_an_nfe_they_cannot_spend_is_refused(gmm, name, nfe, settings):
    with pytest.raises(UnreachableNFEError, match=str(nfe)):
        build(gmm, name, nfe, **settings)


def learned(solver):
    """The parameters that place the intermediate points and scale the step."""
    if solver.name.startswith("amed"):
        return {"head.weight": solver.g.head.weight, "head.bias": solver.g.head.bias}
    return {"r": solver.r_logits, "λ": solver.weight_logits, "c": solver.log_scale}


@pytest.mark.parametrize("name", ["amed", "amed_plugin", "epd", "epd_plugin"])
def test_gradients_reach_the_learned_points_and_scales(gmm, name):
    solver = build(gmm, name, 6)
    x = gmm.prior(noise_like(gmm, 4))
    solver(gmm.denoise, x).square().mean().backward()
    for label, parameter in learned(solver).items():
        assert parameter.grad is not None and (parameter.grad != 0).all(), label
    copy.deepcopy(solver)  # no graph is left behind in the module (amed_plugin's base grid)


@pytest.mark.parametrize("name", ["amed", "amed_plugin", "epd", "epd_plugin"])
def test_trajectory_is_the_coarse_grid(gmm, name):
    solver = build(gmm, name, 6)
    assert solver.supervision == "trajectory" and len(solver.sigmas) == solver.num_steps + 1 == 4
    x = gmm.prior(noise_like(gmm, 2))
    with torch.no_grad():
        trajectory = solver.trajectory(gmm.denoise, x)
        endpoint = solver(gmm.denoise, x)
    assert len(trajectory) == solver.num_steps
    torch.testing.assert_close(trajectory[-1], endpoint)


@pytest.mark.parametrize(
    ("name", "settings", "message"),
    [
        ("amed", {"r_init": 0.0}, "r_init"),
        ("amed", {"r_init": 1.0}, "r_init"),
        ("amed", {"r_init": True}, "r_init"),
        ("amed", {"scale_init": 0.0}, "scale_init"),
        ("amed_plugin", {"scale_init": -1.0}, "scale_init"),
        ("amed", {"scale_init": float("inf")}, "scale_init"),
        ("amed", {"hidden_dim": 0}, "hidden_dim"),
        ("epd", {"points": 0}, "points"),
        ("epd", {"r_init": [0.5]}, "r_init"),
        ("epd", {"r_init": [0.5, 1.0]}, "r_init"),
        ("epd", {"scale_init": 0}, "scale_init"),
        ("amed_plugin", {"base": "heun"}, "one evaluation per step"),
        ("epd_plugin", {"base": "amed"}, "one evaluation per step"),
        ("epd_plugin", {"base": "spanlift", "base_settings": {"base": "heun"}}, "one evaluation"),
        ("amed_plugin", {"base": "s4s_alt"}, "learns its own grid"),
        ("epd_plugin", {"base": "ld3"}, "learns its own grid"),
        ("amed_plugin", {"base_settings": {"afs": True}}, "afs"),
        ("epd_plugin", {"base_settings": {"stride": 2}}, "stride"),
        ("epd_plugin", {"base_settings": {"order": 9}}, "order"),
    ],
)
def test_bad_settings_are_refused(gmm, name, settings, message):
    with pytest.raises(SettingsError, match=message):
        build(gmm, name, 6, **settings)


class LabelShift:
    """A conditional denoiser: D(x, σ, c) = x / (1 + σ²) + c, one label row per sample."""

    def denoise(self, x, sigma, cond):
        assert len(cond) == len(x)
        sigma = torch.as_tensor(sigma, dtype=x.dtype).reshape(-1, *[1] * (x.dim() - 1))
        return x / (1 + sigma**2) + cond.reshape(-1, *[1] * (x.dim() - 1))


def test_parallel_points_see_each_samples_own_conditioning(gmm):
    """EPD's K points go to the model as one call on K stacked copies of the batch: each copy
    must carry the conditioning of its own samples (batched = one sample at a time)."""
    from spanlift.backbones.base import conditioned

    solver = build_solver(SolverSpec("epd", 4, "edm", {"points": 3}), 0.002, 80.0, 1).double()
    x = torch.randn(3, 1, 4, 4, dtype=torch.float64) * 80
    labels = torch.tensor([-1.0, 0.0, 2.0], dtype=torch.float64)
    together = solver(conditioned(LabelShift(), labels), x)
    alone = [solver(conditioned(LabelShift(), labels[k : k + 1]), x[k : k + 1]) for k in range(3)]
    assert torch.allclose(together, torch.cat(alone), atol=1e-12)
