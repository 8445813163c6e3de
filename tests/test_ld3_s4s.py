"""LD3, S4S-Alt and DLMS: untrained they are their analytic base; their grids stay valid; the
alternation of S4S-Alt; counted NFE; bad settings refused."""

import pickle

import pytest
import torch

from spanlift.errors import SettingsError, UnknownNameError
from spanlift.solvers import (
    SOLVERS,
    NFECounter,
    SolverSpec,
    build_solver,
    read_checkpoint,
    save_solver,
)
from spanlift.solvers.capabilities import Alternating
from spanlift.solvers.checkpoint import load_solver_state
from spanlift.solvers.dlms import DLMS
from spanlift.solvers.grid import LearnedGrid
from spanlift.solvers.ld3 import LD3
from spanlift.solvers.s4s_alt import S4SAlt
from spanlift.solvers.schedules import SCHEDULES

from .conftest import NATIVE_SOLVERS, noise_like


def build(backbone, name, nfe=4, schedule="edm", **settings):
    spec = SolverSpec(name, nfe, schedule, settings)
    return build_solver(spec, backbone.sigma_min, backbone.sigma_max, 1)


def endpoint(solver, backbone, x):
    with torch.no_grad():
        return solver(backbone.denoise, x)


def perturb(grid: LearnedGrid, seed: int, scale: float = 1.0) -> None:
    noise = torch.randn(grid.logits.shape, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        grid.logits.add_(scale * noise.to(grid.logits.dtype))


# --- untrained = the analytic base, built directly --------------------------------------------

LD3_CASES = [
    ("euler", {}, "edm"),
    ("heun", {}, "edm"),
    ("ipndm", {"order": 3}, "edm"),
    ("ipndm", {"order": 4, "afs": True}, "logsnr"),
    ("ipndm", {"order": 2}, "edm_to_zero"),
    ("dpm_solver_pp", {"order": 2}, "edm"),
    ("dpm_solver_pp", {"order": 3}, "logsnr"),
    ("dpm_solver_pp", {"order": 3, "afs": True}, "edm_to_zero"),
    ("unipc", {"order": 3}, "edm"),
    ("unipc", {"order": 2, "afs": True}, "logsnr"),
    ("unipc", {"order": 3}, "edm_to_zero"),
]


@pytest.mark.parametrize(("base", "base_settings", "schedule"), LD3_CASES)
def test_untrained_ld3_is_its_base(gmm, gmm64, base, base_settings, schedule):
    nfe = 5 if base == "heun" else 4
    for backbone, dtype, tol in ((gmm, torch.float32, 1e-6), (gmm64, torch.float64, 1e-12)):
        x = backbone.prior(noise_like(backbone, 4, dtype=dtype))
        ld3 = build(backbone, "ld3", nfe, schedule, base=base, base_settings=base_settings)
        plain = build(backbone, base, nfe, schedule, **base_settings)
        torch.testing.assert_close(
            endpoint(ld3, backbone, x), endpoint(plain, backbone, x), atol=tol, rtol=tol
        )
        torch.testing.assert_close(ld3.base.grid().detach(), plain.sigmas, atol=0, rtol=1e-14)


@pytest.mark.parametrize(
    ("order", "afs", "schedule"),
    [
        (1, False, "edm"),
        (2, True, "edm"),
        (3, False, "logsnr"),
        (3, True, "edm"),
        (4, True, "logsnr"),
    ],
)
def test_untrained_s4s_alt_and_dlms_are_ipndm(gmm, gmm64, order, afs, schedule):
    for backbone, dtype, tol in ((gmm, torch.float32, 1e-6), (gmm64, torch.float64, 1e-12)):
        x = backbone.prior(noise_like(backbone, 4, dtype=dtype))
        ipndm = endpoint(build(backbone, "ipndm", 5, schedule, order=order, afs=afs), backbone, x)
        s4s = build(backbone, "s4s_alt", 5, schedule, order=order, afs=afs)
        torch.testing.assert_close(endpoint(s4s, backbone, x), ipndm, atol=tol, rtol=tol)
        dlms = build(backbone, "dlms", 5, schedule, order=order, afs=afs)
        assert torch.equal(endpoint(dlms, backbone, x), ipndm), "DLMS keeps iPNDM's exact grid"


LD3_BASES = sorted(set(NATIVE_SOLVERS) - {"ld3", "oss", "ds_solver"})
"""Every solver LD3 takes as its base: all of spanlift's but OSS, whose searched grid may start
below σ_max where LD3's learned grid keeps its ends (`test_ld3_refuses_oss_as_its_base`), and
DS-Solver, whose grid is its table's (tests/test_ds_solver.py)."""


def test_ld3_refuses_oss_as_its_base(gmm64):
    with pytest.raises(SettingsError, match="oss may start its grid below σ_max"):
        build(gmm64, "ld3", 4, base="oss")


@pytest.mark.parametrize("base", LD3_BASES)
def test_ld3_base_runs_on_the_learned_grid(gmm64, base):
    """After the grid moves, LD3 is its base built directly on the moved grid: every σ the base
    reads comes from the learned grid (a base reading a fixed copy would fail here)."""
    nfe = 5 if base == "heun" else 4
    own = {"degenerated": True} if base == "dpm_solver_v3" else {}  # statistics: from a fit
    ld3 = build(gmm64, "ld3", nfe, base=base, base_settings=own).double()  # its parameters too
    initial = ld3.sigmas.detach().clone()
    perturb(ld3.base.grid, seed=1, scale=0.5)
    moved = ld3.base.grid().detach()
    assert not torch.allclose(moved, initial), "the perturbation must move the grid"
    torch.testing.assert_close(ld3.sigmas.detach(), moved, atol=0, rtol=0)
    plain = SOLVERS.get(base).build(moved, 1, **own).double()
    x = gmm64.prior(noise_like(gmm64, 4, dtype=torch.float64))
    torch.testing.assert_close(
        endpoint(ld3, gmm64, x), endpoint(plain, gmm64, x), atol=1e-12, rtol=1e-12
    )


def test_s4s_alt_runs_on_its_learned_grid(gmm64):
    s4s = build(gmm64, "s4s_alt", 5, order=3)
    perturb(s4s.grid, seed=2, scale=0.5)
    plain = SOLVERS.get("ipndm").build(s4s.grid().detach(), 1, order=3)
    x = gmm64.prior(noise_like(gmm64, 4, dtype=torch.float64))
    torch.testing.assert_close(
        endpoint(s4s, gmm64, x), endpoint(plain, gmm64, x), atol=1e-12, rtol=1e-12
    )


# --- the learned grid -------------------------------------------------------------------------


@pytest.mark.parametrize("schedule", ["edm", "logsnr", "flow", "time", "edm_to_zero"])
@pytest.mark.parametrize("steps", [1, 2, 5, 12])
def test_learned_grid_starts_at_the_schedule_and_stays_valid(schedule, steps):
    sigmas = SCHEDULES.get(schedule)(max(steps, 2), 0.002, 80.0)
    grid = LearnedGrid(sigmas)
    torch.testing.assert_close(grid().detach(), sigmas, atol=0, rtol=1e-14)
    for seed in range(5):
        perturb(grid, seed, scale=8.0)
        moved = grid().detach()
        assert moved[0] == sigmas[0] and moved[-1] == sigmas[-1], "the ends are fixed exactly"
        assert (moved[1:] < moved[:-1]).all(), f"not strictly decreasing: {moved.tolist()}"
        single = moved.float()
        assert (single[1:] < single[:-1]).all(), "float32 rounding must not merge grid points"
    with torch.no_grad():
        grid.logits.copy_(1e4 * torch.linspace(-1, 1, len(grid.logits), dtype=torch.float64))
    extreme = grid().float()
    assert (extreme[1:] < extreme[:-1]).all(), f"extreme logits: {extreme.tolist()}"


def test_learned_grid_stays_valid_under_optimisation(gmm):
    ld3 = build(gmm, "ld3", 6)
    optimizer = torch.optim.SGD(ld3.base.grid.parameters(), lr=100.0)  # deliberately huge steps
    x = gmm.prior(noise_like(gmm, 2))
    initial = ld3.sigmas.detach().clone()
    for _ in range(2):
        optimizer.zero_grad()
        ld3(gmm.denoise, x).square().mean().backward()
        optimizer.step()
        grid = ld3.base.grid().detach()
        assert grid[0] == initial[0] and grid[-1] == initial[-1]
        assert (grid[1:] < grid[:-1]).all()


def test_gradient_reaches_the_ld3_logits_only(gmm):
    ld3 = build(gmm, "ld3", 4, base="dyweight")
    x = gmm.prior(noise_like(gmm, 4))
    ld3(gmm.denoise, x).square().mean().backward()
    grad = ld3.base.grid.logits.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0
    trainable = [name for name, p in ld3.named_parameters() if p.requires_grad]
    assert trainable == ["base.grid.logits"], "LD3 learns only its grid; the base is frozen"


def test_gradients_reach_both_s4s_alt_groups(gmm):
    s4s = build(gmm, "s4s_alt", 5, order=3)
    x = gmm.prior(noise_like(gmm, 4))
    s4s(gmm.denoise, x).square().mean().backward()
    assert s4s.grid.logits.grad.abs().sum() > 0
    used = torch.ones_like(s4s.coefficients).tril().bool()
    assert (s4s.coefficients.grad[used] != 0).all(), "every coefficient that is read gets a grad"


def test_checkpoint_state_restores_the_learned_grid(gmm):
    ld3, fresh = build(gmm, "ld3", 4), build(gmm, "ld3", 4)
    perturb(ld3.base.grid, seed=3)
    fresh.load_state_dict(ld3.state_dict())
    assert torch.equal(fresh.base.grid(), ld3.base.grid())


@pytest.mark.parametrize(
    ("name", "settings", "keys"),
    [
        (
            "ld3",
            {"base": "dyweight"},
            {"base.weights", "base.log_time_scale", "base.mask"}
            | {"base.grid.ends", "base.grid.floor", "base.grid.logits"},
        ),
        (
            "s4s_alt",
            {"order": 3},
            {"coefficients", "grid.ends", "grid.floor", "grid.logits"},
        ),
    ],
)
def test_checkpoint_round_trip_restores_the_learned_grid(gmm, tmp_path, name, settings, keys):
    """save_solver, then build from the saved spec and load_state_dict: the same solver."""
    trained = build(gmm, name, 4, **settings)
    perturb(trained.base.grid if name == "ld3" else trained.grid, seed=5)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.01)  # every parameter moved, frozen ones too
    assert set(trained.state_dict()) == keys
    path = save_solver(tmp_path / "solver.pt", trained)
    spec = SolverSpec.from_dict(read_checkpoint(path)["spec"])
    reloaded = build_solver(spec, gmm.sigma_min, gmm.sigma_max, 1)
    reloaded.load_state_dict(load_solver_state(path, expected=name))
    for key, value in trained.state_dict().items():
        assert torch.equal(reloaded.state_dict()[key], value), key
    x = gmm.prior(noise_like(gmm, 2))
    assert torch.equal(endpoint(reloaded, gmm, x), endpoint(trained, gmm, x))


def test_ld3_pickles_with_its_learned_grid(gmm):
    ld3 = build(gmm, "ld3", 4, base="dpm_solver_pp")
    perturb(ld3.base.grid, seed=4)
    copy = pickle.loads(pickle.dumps(ld3))
    x = gmm.prior(noise_like(gmm, 2))
    assert torch.equal(endpoint(copy, gmm, x), endpoint(ld3, gmm, x))


def test_fitting_the_grid_lowers_the_endpoint_error(gmm):
    """A few steps of endpoint matching against a fine iPNDM teacher improve LD3 on that batch."""
    x = gmm.prior(noise_like(gmm, 8))
    target = endpoint(build(gmm, "ipndm", 40), gmm, x)
    ld3 = build(gmm, "ld3", 4, base="euler")
    optimizer = torch.optim.Adam(ld3.base.grid.parameters(), lr=0.05)
    losses = []
    for _ in range(6):
        optimizer.zero_grad()
        loss = (ld3(gmm.denoise, x) - target).square().mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.75 * losses[0], losses


# --- S4S-Alt's alternation --------------------------------------------------------------------


def test_s4s_alt_alternates_coefficients_first(gmm):
    s4s = build(gmm, "s4s_alt", 4, alternate_every=3)
    grid, coefficients = [s4s.grid.logits], [s4s.coefficients]
    expected = [grid] * 3 + [coefficients] * 3 + [grid] * 3 + [coefficients]
    for iteration, inactive in enumerate(expected):
        got = s4s.inactive_parameters(iteration)
        assert len(got) == 1 and got[0] is inactive[0], f"iteration {iteration}"
    default = build(gmm, "s4s_alt", 4)
    assert default.alternate_every == 50
    assert default.inactive_parameters(49)[0] is default.grid.logits
    assert default.inactive_parameters(50)[0] is default.coefficients


def test_supervision_and_slack(gmm):
    assert build(gmm, "ld3", 4).supervision == "endpoint"
    assert build(gmm, "ld3", 4).input_slack == 0.1
    assert build(gmm, "ld3", 4, slack=0.0).input_slack == 0.0
    assert build(gmm, "ld3", 4, slack=0.25).input_slack == 0.25
    assert build(gmm, "s4s_alt", 4).supervision == "endpoint"
    assert build(gmm, "dlms", 4).supervision == "trajectory"
    assert not isinstance(build(gmm, "dlms", 4), Alternating)


# --- NFE --------------------------------------------------------------------------------------

NFE_CASES = [
    ("ld3", nfe, {"base": base, "base_settings": {"afs": afs}})
    for base in ("euler", "ipndm", "dpm_solver_pp", "unipc", "dyweight", "dlms")
    for afs in (False, True)
    for nfe in (2, 5)
] + [
    ("ld3", 5, {"base": "heun"}),
    ("ld3", 4, {"base": "heun", "base_settings": {"afs": True}}),
    *[
        (name, nfe, {"afs": afs})
        for name in ("s4s_alt", "dlms")
        for afs in (False, True)
        for nfe in (2, 5)
    ],
]


@pytest.mark.parametrize(("name", "nfe", "settings"), NFE_CASES)
def test_counted_nfe_equals_claimed(gmm, name, nfe, settings):
    solver = build(gmm, name, nfe, **settings)
    counter = NFECounter(gmm.denoise)
    with torch.no_grad():
        solver(counter, gmm.prior(noise_like(gmm, 2)))
    assert counter.calls == nfe == solver.nfe


# --- bad settings -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "settings", "message"),
    [
        ("ld3", {"slack": -0.1}, "slack must be ≥ 0"),
        ("ld3", {"slack": float("nan")}, "slack"),
        ("ld3", {"slack": "wide"}, "slack"),
        ("ld3", {"base_settings": {"bogus": 1}}, "no setting 'bogus'"),
        ("ld3", {"base": "ipndm", "base_settings": {"order": 7}}, "order"),
        ("s4s_alt", {"order": 0}, "order"),
        ("s4s_alt", {"order": 5}, "order"),
        ("s4s_alt", {"alternate_every": 0}, "alternate_every"),
        ("s4s_alt", {"alternate_every": 2.5}, "alternate_every"),
        ("dlms", {"order": 5}, "order"),
    ],
)
def test_bad_settings_are_refused(gmm, name, settings, message):
    with pytest.raises(SettingsError, match=message):
        build(gmm, name, 4, **settings)


def test_ld3_is_not_its_own_base(gmm):
    with pytest.raises(SettingsError, match="ld3 cannot be its own base"):
        build(gmm, "ld3", 4, base="ld3")


def test_ld3_over_s4s_alt_learns_one_grid(gmm):
    ld3 = build(gmm, "ld3", 4, base="s4s_alt")
    assert ld3.grid is ld3.base.grid, "one learned grid, read by both"
    trainable = [name for name, p in ld3.named_parameters() if p.requires_grad]
    assert trainable == ["base.grid.logits"], "the base's coefficients are frozen"


def test_unknown_base_names_the_known_ones(gmm):
    with pytest.raises(UnknownNameError, match="ipndm"):
        build(gmm, "ld3", 4, base="nope")


@pytest.mark.parametrize("cls", [LD3, S4SAlt])
@pytest.mark.parametrize(
    "sigmas", [[80.0, 1.0, 1.0, 0.002], [80.0, 0.5, 1.0, 0.002], [0.002, 80.0], [80.0, -1.0]]
)
def test_a_grid_that_does_not_decrease_strictly_is_refused(cls, sigmas):
    with pytest.raises(SettingsError, match=f"{cls.name} schedule must decrease strictly"):
        cls(torch.tensor(sigmas, dtype=torch.float64))


def test_dlms_is_not_a_grid_learner(gmm):
    assert isinstance(build(gmm, "dlms", 4), DLMS)
    assert [n for n, _ in build(gmm, "dlms", 4).named_parameters()] == ["coefficients"]
