"""PAS: its basis against its authors' `correction_d` (onefly123/PAS; fixture
tests/fixtures/pas_reference.json), untrained it is its base, and a short fit round-trips."""

import json
from pathlib import Path

import pytest
import torch

from spanlift.errors import SettingsError
from spanlift.platform.fitting.fit import FitSettings, fit
from spanlift.platform.sampling.teacher import generate_teacher, teacher_for
from spanlift.platform.sweep.config import parse_sweep
from spanlift.solvers import SolverSpec, build_solver, save_solver
from spanlift.solvers.loading import load_solver
from spanlift.solvers.pas import pca_basis

from .conftest import noise_like

REFERENCE = json.loads((Path(__file__).parent / "fixtures" / "pas_reference.json").read_text())


def build(backbone, nfe=4, schedule="edm", **settings):
    spec = SolverSpec("pas", nfe, schedule, settings)
    return build_solver(spec, backbone.sigma_min, backbone.sigma_max, 1)


def endpoint(solver, backbone, x):
    with torch.no_grad():
        return solver(backbone.denoise, x)


@pytest.mark.parametrize(
    "case", REFERENCE["cases"], ids=lambda c: f"K{c['components']}-{c['kind']}"
)
def test_the_corrected_direction_equals_the_reference(case):
    """Σ_k c_k u_k with spanlift's basis and the reference's (absolute) coordinates is the
    reference's corrected direction: PCA, Gram–Schmidt and the sign flip (measured ≤ 1e-14)."""

    def tensor(values):
        return torch.tensor(values, dtype=torch.float64).reshape(REFERENCE["batch"], -1)

    start, x, direction = tensor(case["x_start"]), tensor(case["x"]), tensor(case["direction"])
    rows = [start] if case["start"] else []
    rows += [tensor(p) for p in case["previous"]] + [direction]
    basis = pca_basis(torch.stack(rows, dim=1), direction, x - start, case["components"])
    coordinates = torch.tensor(case["coordinates"], dtype=torch.float64)
    corrected = torch.einsum("k,bkd->bd", coordinates, basis)
    torch.testing.assert_close(corrected, tensor(case["corrected"]), rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "case",
    REFERENCE["early"]["cases"],
    ids=lambda c: f"K{c['components']}-start{c['start']}-step{c['step']}",
)
def test_a_step_with_one_row_short_equals_the_reference_but_its_undetermined_direction(case):
    """At the first step the reference corrects (K − 1 rows with the direction: step 1 for K = 4
    with x_T), spanlift's correction with all K coordinates is the reference's with c_K = 0, and
    the reference's own differs from it by c_K times a unit vector orthogonal to the rows: the
    last principal direction, which the rows leave undetermined (measured ≤ 1e-15). At step 0
    with x_T, x_i − x_T = 0 orients nothing: u_2's sign is each PCA's own, and is matched."""

    def tensor(values):
        return torch.tensor(values, dtype=torch.float64).reshape(REFERENCE["batch"], -1)

    start, x, direction = tensor(case["x_start"]), tensor(case["x"]), tensor(case["direction"])
    rows = torch.stack(
        ([start] if case["start"] else []) + [tensor(p) for p in case["previous"]] + [direction],
        dim=1,
    )
    assert rows.shape[1] == case["components"] - 1
    basis = pca_basis(rows, direction, x - start, case["components"])
    coordinates = torch.tensor(case["coordinates"], dtype=torch.float64)
    expected = tensor(case["corrected_without_last"])
    if case["step"] == 0 and case["start"] and case["components"] == 3:
        # x = x_T: the flip leaves u_2 the sign each PCA gives it, so take the reference's
        along = torch.einsum("bd,bd->b", expected - coordinates[0] * basis[:, 0], basis[:, 1])
        basis[:, 1] *= torch.sign(along * coordinates[1])[:, None]
    corrected = torch.einsum("k,bkd->bd", coordinates, basis)
    torch.testing.assert_close(corrected, expected, rtol=0, atol=1e-12)
    rest = (tensor(case["corrected"]) - corrected) / coordinates[-1]
    torch.testing.assert_close(rest.norm(dim=-1), torch.ones(len(rest), dtype=torch.float64))
    inside = torch.einsum("bnd,bd->bn", rows, rest) / rows.norm(dim=-1)
    assert inside.abs().max() < 1e-12


def test_the_authors_first_corrected_steps():
    """onefly123/PAS search_by_pca.py skips step 0 for K = 4, and for K = 3 without x_T, and step
    1 for K = 4 without x_T; every other step it may correct."""
    for components, start, first in [
        (1, False, 0),
        (2, False, 0),
        (3, True, 0),
        (3, False, 1),
        (4, True, 1),
        (4, False, 2),
    ]:
        pas = build_solver(
            SolverSpec("pas", 5, settings={"components": components, "start": start}),
            0.002,
            80.0,
            1,
        )
        assert sorted(pas.rows) == list(range(first, 5)), (components, start)


@pytest.mark.parametrize("base", ["euler", "ipndm", "deis", "dpm_solver_pp", "heun"])
@pytest.mark.parametrize("schedule", ["edm", "edm_to_zero"])
def test_untrained_pas_is_its_base(gmm, gmm64, base, schedule):
    nfe = 5 if base == "heun" else 4
    for backbone, dtype in ((gmm, torch.float32), (gmm64, torch.float64)):
        x = backbone.prior(noise_like(backbone, 4, dtype=dtype))
        pas = build(backbone, nfe, schedule, base=base, components=3).to(dtype)
        plain = build_solver(SolverSpec(base, nfe, schedule), 0.002, 80.0, 1).to(dtype)
        assert pas.rows, "some steps are corrected"
        assert torch.equal(endpoint(pas, backbone, x), endpoint(plain, backbone, x))


def test_the_rows_are_the_directions_the_rollout_took(gmm64):
    """With moved coordinates, the rows of the basis at the last step are x_T and the directions
    of the steps before it, as the rollout took them (corrected ones included)."""
    pas = build(gmm64, 5, components=2).double()
    with torch.no_grad():
        pas.coordinates.add_(torch.tensor([[0.05, -0.3]], dtype=torch.float64))
    x = gmm64.prior(noise_like(gmm64, 3, dtype=torch.float64))
    steps = list(pas.steps(gmm64.denoise, x))
    last = steps[-1]
    with torch.no_grad():
        rows = pas.trajectory_rows(last.i, last.x, last.history, last.direction)
    taken = [s.direction.flatten(1) for s in steps[:-1]]
    expected = torch.stack([x.flatten(1), *taken, last.direction.flatten(1)], dim=1)
    torch.testing.assert_close(rows, expected, rtol=1e-9, atol=1e-9)
    plain = endpoint(build(gmm64, 5, components=2).double(), gmm64, x)
    assert not torch.allclose(steps[-1].x_next, plain), "the coordinates act on the rollout"


def test_a_short_fit_moves_the_coordinates_and_round_trips(gmm, tmp_path):
    teacher = generate_teacher(gmm, range(24), SolverSpec("ipndm", 12), progress=False)
    pas = build(gmm, 4, base="ipndm")
    train = teacher_for(pas, teacher, gmm)
    before = pas.coordinates.detach().clone()
    fit(pas, gmm, train, FitSettings(iterations=4, batch_size=8, warmup=0), progress=False)
    assert not torch.equal(pas.coordinates.detach(), before)
    assert pas.coordinates.shape == (len(pas.rows), 4) and sorted(pas.rows) == [1, 2, 3]
    path = save_solver(tmp_path / "pas.pt", pas)
    loaded = load_solver(pas.spec, path, gmm)
    x = gmm.prior(noise_like(gmm, 4))
    assert torch.equal(endpoint(loaded, gmm, x), endpoint(pas, gmm, x))


@pytest.mark.parametrize(
    ("settings", "shown"),
    [
        ({"components": 5}, "components must be an integer from 1 to 4"),
        ({"corrected": [0]}, "corrected must list distinct steps from 1 to 3"),
        ({"corrected": [2, 2]}, "distinct"),
        ({"corrected": [1], "components": 4, "start": False}, "from 2 to 3"),
        ({"start": "yes"}, "start must be true or false"),
        ({"base": "amed_plugin"}, "no Δ to correct"),
        ({"base": "gits"}, "its search moves the grid"),
    ],
)
def test_bad_settings_are_one_line(gmm, settings, shown):
    with pytest.raises(SettingsError, match=shown):
        build(gmm, 4, **settings)


def test_a_sweep_entry_validates():
    config = parse_sweep(
        {
            "experiment": "t",
            "backbone": "gmm",
            "solvers": [
                {
                    "name": "pas",
                    "nfe": 5,
                    "settings": {"base": "ipndm", "corrected": [3, 4]},
                    "search": {"components": [3, 4]},
                }
            ],
        }
    )
    assert [s.settings["components"] for s in config.trials()] == [3, 4]


def test_at_step_0_the_basis_points_towards_x_t(gmm64):
    """At step 0 x_i − x_T = 0 orients nothing; the second direction is turned towards x_T."""
    pas = build(gmm64, 4, components=2).double()
    assert 0 in pas.rows
    with torch.no_grad():
        pas.coordinates[pas.rows[0]] = torch.tensor([1.0, 0.5], dtype=torch.float64)
    x = gmm64.prior(noise_like(gmm64, 8, dtype=torch.float64))
    first = next(iter(pas.steps(gmm64.denoise, x)))
    plain = first.history[0].derivative
    assert ((first.direction - plain).flatten(1) * x.flatten(1)).sum(-1).min() > 0
