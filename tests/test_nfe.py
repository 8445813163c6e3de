"""NFE is counted, not assumed: every solver spends exactly the NFE it is built for."""

import pytest
import torch

from spanlift.errors import UnreachableNFEError
from spanlift.solvers import SOLVERS, NFECounter, SolverSpec, build_solver

from .conftest import noise_like


def reachable_nfes(name: str, afs: bool) -> tuple[int, ...]:
    if name == "heun":  # 2N − 1 evaluations, 2N − 2 with AFS
        return (2, 4, 6) if afs else (3, 5, 7)
    return (2, 3, 4, 6, 8)


def cases():
    for name in SOLVERS.names():
        if name == "spanlift":
            continue
        orders = {
            "ipndm": [1, 2, 3, 4],
            "dyweight": [1, 3],
            "dpm_solver_pp": [2, 3],
            "unipc": [1, 2, 3],
        }
        for afs in (False, True):
            for order in orders.get(name, [None]):
                settings = {"afs": afs} | ({"order": order} if order else {})
                for nfe in reachable_nfes(name, afs):
                    yield name, nfe, settings
    for base in ("euler", "heun", "ipndm", "dyweight", "dpm_solver_pp", "unipc"):
        for afs in (False, True):
            nfe = 5 if base == "heun" and not afs else 4
            yield "spanlift", nfe, {"base": base, "base_settings": {"afs": afs}, "hidden_dim": 8}


@pytest.mark.parametrize(("name", "nfe", "settings"), list(cases()))
def test_counted_nfe_equals_claimed(gmm, name, nfe, settings):
    solver = build_solver(SolverSpec(name, nfe, "edm", settings), gmm.sigma_min, gmm.sigma_max, 1)
    counter = NFECounter(gmm.denoise)
    with torch.no_grad():
        solver(counter, gmm.prior(noise_like(gmm, 2)))
    assert counter.calls == nfe == solver.nfe


def test_afs_saves_one_evaluation_per_rollout(gmm):
    plain = build_solver(SolverSpec("ipndm", 4), gmm.sigma_min, gmm.sigma_max, 1)
    afs = build_solver(
        SolverSpec("ipndm", 4, settings={"afs": True}), gmm.sigma_min, gmm.sigma_max, 1
    )
    assert afs.num_steps == plain.num_steps + 1


@pytest.mark.parametrize(
    ("name", "nfe", "settings"),
    [
        ("heun", 4, {}),
        ("heun", 2, {}),
        ("euler", 0, {}),
        ("euler", -1, {}),
        ("euler", 2.5, {}),
        ("spanlift", 4, {"base": "heun"}),
    ],
)
def test_unreachable_nfe_is_a_clear_error(gmm, name, nfe, settings):
    with pytest.raises(UnreachableNFEError, match=str(nfe)):
        build_solver(SolverSpec(name, nfe, "edm", settings), gmm.sigma_min, gmm.sigma_max, 1)
