"""NFE is counted, not assumed: every solver spends exactly the NFE it is built for."""

import pytest
import torch

from spanlift.errors import UnreachableNFEError
from spanlift.solvers import NFECounter, SolverSpec, build_solver

from .conftest import NATIVE_SOLVERS, noise_like


def reachable_nfes(name: str, afs: bool) -> tuple[int, ...]:
    if name == "heun":  # 2N − 1 evaluations, 2N − 2 with AFS
        return (2, 4, 6) if afs else (3, 5, 7)
    if name in ("amed", "amed_plugin", "epd", "epd_plugin"):  # 2N evaluations, 2N − 1 with AFS
        return (1, 3, 5, 7) if afs else (2, 4, 6, 8)
    return (2, 3, 4, 6, 8)


def cases():
    for name in NATIVE_SOLVERS:
        if name in ("spanlift", "ld3", "gits", "pas", "oss", "flowturbo", "ds_solver"):
            continue
        if name == "dpm_solver_v3":  # no AFS; statistics do not change its calls: degenerated
            yield from ((name, nfe, {"degenerated": True}) for nfe in (2, 3, 4, 6))
            continue
        orders = {
            "ipndm": [1, 2, 3, 4],
            "deis": [1, 2, 3, 4],
            "dyweight": [1, 3],
            "dpm_solver_pp": [2, 3],
            "unipc": [1, 2, 3],
            "s4s_alt": [1, 2, 3, 4],
            "dlms": [1, 2, 3, 4],
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
    for base in ("euler", "heun", "ipndm", "dyweight", "dpm_solver_pp", "unipc", "dlms", "s4s_alt"):
        for afs in (False, True):
            nfe = 5 if base == "heun" and not afs else 4
            yield "ld3", nfe, {"base": base, "base_settings": {"afs": afs}}
    for base in ("euler", "heun", "ipndm", "deis", "dpm_solver_pp", "unipc"):
        for afs in (False, True):
            nfe = 5 if base == "heun" and not afs else 4
            for name in ("gits", "pas", "oss"):
                yield name, nfe, {"base": base, "base_settings": {"afs": afs}}
    for base in ("amed", "epd", "amed_plugin", "epd_plugin"):
        for afs in (False, True):
            yield "ld3", 3 if afs else 4, {"base": base, "base_settings": {"afs": afs}}
    for nfe in (5, 6, 8, 10):  # DS-Solver's released tables: 5–10 and 15 steps, no AFS
        yield "ds_solver", nfe, {}


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


def test_a_solver_whose_grid_changes_its_spend_is_refused_not_mislabelled():
    """AMED's last step to σ = 0 (edm_to_zero) is one evaluation, not two: 4 steps spend 7.
    A spec asking for 8 must fail rather than be recorded as NFE 8."""
    with pytest.raises(UnreachableNFEError, match="cannot spend exactly nfe=8"):
        build_solver(SolverSpec("amed", 8, "edm_to_zero"), 0.002, 80.0, 1)
    assert build_solver(SolverSpec("amed", 7, "edm_to_zero"), 0.002, 80.0, 1).nfe == 7
