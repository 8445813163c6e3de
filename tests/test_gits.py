"""GITS against its authors' code (diff-sampler gits-main: `dp`, `get_dp_list`, `ipndm_sampler`;
tests/fixtures/gits_reference.json), its unsearched state, and its search inside a fit."""

import json
from pathlib import Path

import pytest
import torch

from spanlift.errors import SettingsError, UnknownNameError
from spanlift.platform.fitting.fit import FitSettings, fit
from spanlift.platform.sampling.teacher import generate_teacher
from spanlift.platform.sweep.config import parse_sweep
from spanlift.solvers import SOLVERS, SolverSpec, build_solver, save_solver
from spanlift.solvers.gits import GITS, METRICS, cost_matrix, dynamic_programming, warm_up
from spanlift.solvers.loading import is_learnable, load_solver
from spanlift.solvers.on_base import searched
from spanlift.solvers.schedules import SCHEDULES, edm_polynomial

from .conftest import noise_like, stored_mixture

REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "gits_reference.json").read_text())
README_GRID = REFERENCE["readme_grid"]["grid"]


@pytest.fixture(scope="module")
def reference_gmm():
    return stored_mixture(REFERENCE["gmm"])


def build(backbone, nfe=4, schedule="edm", **settings):
    spec = SolverSpec("gits", nfe, schedule, settings)
    return build_solver(spec, backbone.sigma_min, backbone.sigma_max, 1)


def endpoint(solver, backbone, x):
    with torch.no_grad():
        return solver(backbone.denoise, x)


def test_dp_returns_the_reference_index_lists():
    dp = REFERENCE["dp"]
    for case in dp["cases"]:
        cost = torch.tensor(dp[f"cost_{case['matrix']}"], dtype=torch.float64)
        path = dynamic_programming(cost, case["num_steps"] - 1, case["coeff"])
        assert path == case["indices"], case


def upper_to_matrix(values: list[float], size: int) -> torch.Tensor:
    matrix = torch.zeros(size, size, dtype=torch.float64)
    rows, cols = torch.triu_indices(size, size, 1)
    matrix[rows, cols] = torch.tensor(values, dtype=torch.float64)
    return matrix


@pytest.fixture(scope="module")
def reference_warm_up(reference_gmm):
    """The reference's warm-up noise at σ_max, the fine grid (61 EDM points) and spanlift's
    warm-up on it with gits-main's teacher, iPNDM of order 4."""
    noise = torch.randn(
        64, 1, 8, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64
    )
    x = reference_gmm.prior(noise)
    fine = GITS(edm_polynomial(6, 0.002, 80.0)).fine_grid()
    states, derivatives = warm_up(SOLVERS.get("ipndm")(fine, order=4), reference_gmm.denoise, x)
    return x, fine, states, derivatives


def test_search_on_the_gmm_equals_the_reference(reference_gmm, reference_warm_up):
    """The warm-up (iPNDM order 4 on 61 EDM points), the cost matrix of each metric and the DP's
    points, from the reference's warm-up noise. The reference steps with float32 σ and stores the
    cost in float32: measured gaps ≤ 5e-6 of the largest cost."""
    search = REFERENCE["search"]
    x, fine, states, derivatives = reference_warm_up
    for metric in ("dev", "l2", "l1"):
        expected = upper_to_matrix(search[metric]["cost_upper"], len(fine))
        cost = cost_matrix(fine, states, derivatives, METRICS.get(metric))
        torch.testing.assert_close(cost, expected, rtol=0, atol=2e-5 * expected.abs().max())
        assert dynamic_programming(cost, 6, 1.15) == search[metric]["indices"], metric
    searched = GITS(
        edm_polynomial(6, 0.002, 80.0), base_settings={"order": 4}, teacher_settings={"order": 4}
    )
    searched.prepare([(reference_gmm.denoise, x)])
    assert torch.equal(searched.sigmas, fine[search["dev"]["indices"]])
    assert bool(searched.searched)


def afs_gits(nfe: int, **settings) -> GITS:
    """iPNDM order 4 with AFS at `nfe` (nfe + 1 steps), as gits-main's AFS runs sample."""
    return GITS(
        edm_polynomial(nfe + 1, 0.002, 80.0), base_settings={"order": 4, "afs": True}, **settings
    )


@pytest.mark.parametrize("nfe", [4, 5, 6])
def test_the_afs_point_equals_the_reference(reference_gmm, reference_warm_up, nfe):
    """With AFS the DP picks NFE steps and one point is put after σ_max, the one whose rollout ends
    nearest the teacher's endpoint: gits-main's points (at NFE 4 through the whole search), and
    its endpoint errors at its best three points (it steps with float32 σ: measured ≤ 2e-5
    apart, where its best two differ by 7e-4 or more)."""
    reference = REFERENCE["afs"]["teacher_without_afs"][str(nfe)]
    x, fine, states, derivatives = reference_warm_up
    path = dynamic_programming(
        cost_matrix(fine, states, derivatives, METRICS.get("dev")), nfe, 1.15
    )
    assert path == reference["dp"]
    gits, warmed = (
        afs_gits(nfe, teacher_settings={"order": 4}),
        [(reference_gmm.denoise, x, states[-1])],
    )
    if nfe == 4:
        gits.prepare([(reference_gmm.denoise, x)])
        assert torch.equal(gits.sigmas, fine[reference["dp_list"]])
        assert gits.num_steps == nfe + 1 and gits.nfe == nfe
    else:
        assert gits.afs_point(fine, path, warmed) == reference["dp_list"][1]
    best = sorted(reference["candidates"], key=lambda c: c["error"])[:3]
    errors = [gits.endpoint_error(fine[[0, c["k"], *path[1:]]], warmed) for c in best]
    expected = [c["error"] for c in best]
    torch.testing.assert_close(torch.tensor(errors), torch.tensor(expected), rtol=1e-4, atol=0)


def test_a_teacher_with_afs_leaves_no_room_for_the_afs_point(reference_gmm, reference_warm_up):
    """gits-main run as it is hands the student's AFS to its warm-up teacher: the teacher's free
    first step costs nothing, the DP takes σ_1 of the fine grid, and no AFS point fits before it
    (gits-main then samples with one evaluation fewer); spanlift refuses, in one line."""
    x, fine = reference_warm_up[:2]
    teacher = SOLVERS.get("ipndm")(fine, order=4, afs=True)
    states, derivatives = warm_up(teacher, reference_gmm.denoise, x)
    cost = cost_matrix(fine, states, derivatives, METRICS.get("dev"))
    assert abs(cost[0, 1]) < 1e-12 * cost.abs().max()
    path = dynamic_programming(cost, 4, 1.15)
    assert path == REFERENCE["afs"]["unmodified"]["4"]["dp_list"]
    with pytest.raises(SettingsError, match="no fine point between σ_0 and its first searched"):
        afs_gits(4).afs_point(fine, path, [(reference_gmm.denoise, x, states[-1])])


def test_ipndm_on_the_readme_grid_equals_the_reference_sampler(reference_gmm):
    """gits-main's README grid for CIFAR-10 has 7 time points (its `num_steps`): 6 steps, NFE 6
    for iPNDM, which is how spanlift counts it."""
    assert len(README_GRID) == 7
    gits = build(reference_gmm, nfe=6, base_settings={"order": 4})
    assert gits.num_steps == 6
    grid = gits.sigmas.clone()  # its ends, 80 and 0.002 to rounding; the README's points between
    grid[1:-1] = torch.tensor(README_GRID[1:-1], dtype=torch.float64)
    gits.grid.assign(grid)
    noise = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    x = endpoint(gits, reference_gmm, reference_gmm.prior(noise)).flatten()
    expected = torch.tensor(REFERENCE["readme_grid"]["endpoint"], dtype=torch.float64)
    torch.testing.assert_close(x, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("base", ["euler", "heun", "ipndm", "deis", "dpm_solver_pp", "dyweight"])
@pytest.mark.parametrize("schedule", ["edm", "logsnr", "edm_to_zero"])
def test_unsearched_gits_is_its_base(gmm64, base, schedule):
    nfe = 5 if base == "heun" else 4
    x = gmm64.prior(noise_like(gmm64, 4, dtype=torch.float64))
    gits = build(gmm64, nfe, schedule, base=base).double()
    plain = build_solver(SolverSpec(base, nfe, schedule), 0.002, 80.0, 1).double()
    assert torch.equal(endpoint(gits, gmm64, x), endpoint(plain, gmm64, x))
    assert not bool(gits.searched) and is_learnable(gits) and gits.nfe == plain.nfe


def test_a_fit_searches_on_the_training_noise_and_the_grid_reloads(gmm, tmp_path):
    """GITS has no trainable parameters: the fit runs its search once and keeps the grid as
    state; the checkpoint reloads it; a searched GITS does not search again."""
    train = generate_teacher(gmm, range(24), SolverSpec("ipndm", 12), progress=False)
    gits = build(gmm, 4, fine_steps=20)
    initial = gits.sigmas.clone()
    result = fit(gits, gmm, train, FitSettings(iterations=3, batch_size=8), progress=False)
    assert bool(gits.searched) and len(result.losses) == 1
    grid = gits.sigmas.clone()
    assert not torch.equal(grid, initial) and grid[0] == initial[0] and grid[-1] == initial[-1]
    fine = SCHEDULES.get("edm")(20, 0.002, 80.0)
    assert all(torch.isclose(fine, s, rtol=1e-12).any() for s in grid), "points of the fine grid"
    path = save_solver(tmp_path / "gits.pt", gits)
    loaded = load_solver(gits.spec, path, gmm)
    assert torch.equal(loaded.sigmas, grid) and bool(loaded.searched)
    x = gmm.prior(noise_like(gmm, 4))
    assert torch.equal(endpoint(loaded, gmm, x), endpoint(gits, gmm, x))
    loaded.prepare([(gmm.denoise, gmm.prior(noise_like(gmm, 8, seed=5)))])
    assert torch.equal(loaded.sigmas, grid)


def test_the_search_keeps_a_last_step_to_zero_and_sets_a_learned_grid(gmm):
    x = gmm.prior(noise_like(gmm, 16))
    to_zero = build(gmm, 4, "edm_to_zero", fine_steps=12)
    to_zero.prepare([(gmm.denoise, x)])
    grid = to_zero.sigmas
    assert grid[-1] == 0 and grid[-2] == pytest.approx(0.002) and to_zero.ends_at_zero
    ld3 = build_solver(SolverSpec("ld3", 4, settings={"base": "gits"}), 0.002, 80.0, 1)
    searched(ld3).prepare([(gmm.denoise, x)])  # LD3's base searches
    gits = build(gmm, 4)
    gits.prepare([(gmm.denoise, x[:5]), (gmm.denoise, x[5:])])  # batches: the same mean cost
    torch.testing.assert_close(ld3.sigmas.detach(), gits.sigmas, rtol=1e-12, atol=0)
    assert ld3.base.grid.logits.requires_grad, "LD3 goes on learning from the searched grid"


def test_with_afs_and_a_last_step_to_zero_the_afs_point_is_inserted_after_sigma_max(gmm):
    """NFE 4 with AFS on `edm_to_zero`: 5 steps, the last to σ = 0; the DP picks 3 of the 4 steps
    down to σ_min and the AFS point lies between its first two points, on the fine grid."""
    x = gmm.prior(noise_like(gmm, 16))
    gits = build(gmm, 4, "edm_to_zero", fine_steps=12, base_settings={"afs": True})
    fine = gits.fine_grid()
    gits.prepare([(gmm.denoise, x)])
    grid = gits.sigmas
    assert gits.num_steps == 5 and gits.nfe == 4 and grid[-1] == 0
    path = [int(torch.isclose(fine, s, rtol=1e-12).nonzero()) for s in grid[:-1]]
    teacher = SOLVERS.get("ipndm")(fine)
    cost = cost_matrix(fine, *warm_up(teacher, gmm.denoise, x), METRICS.get("dev"))
    assert [path[0], *path[2:]] == dynamic_programming(cost, 3, 1.15)
    assert 0 < path[1] < path[2]


@pytest.mark.parametrize(
    ("settings", "error", "shown"),
    [
        ({"fine_steps": 2}, SettingsError, "fine_steps must be at least the 4"),
        ({"fine_schedule": "edm_to_zero"}, SettingsError, "fine_schedule"),
        ({"fine_schedule": "karras"}, UnknownNameError, "karras"),
        ({"metric": "l3"}, UnknownNameError, "l3"),
        ({"coeff": 0}, SettingsError, "coeff"),
        ({"teacher_settings": {"ordre": 4}}, SettingsError, "ordre"),
        ({"base": "s4s_alt"}, SettingsError, "s4s_alt learns its own grid"),
    ],
)
def test_bad_settings_are_one_line(gmm, settings, error, shown):
    with pytest.raises(error, match=shown):
        build(gmm, 4, **settings)


def test_a_sweep_entry_validates():
    config = parse_sweep(
        {
            "experiment": "t",
            "backbone": "gmm",
            "solvers": [
                {
                    "name": "gits",
                    "nfe": [4, 6],
                    "settings": {"base_settings": {"order": 4}, "teacher_settings": {"order": 4}},
                    "search": {"coeff": [1.1, 1.15]},
                    "fit": {"iterations": 1},
                }
            ],
        }
    )
    assert len(config.trials()) == 4
