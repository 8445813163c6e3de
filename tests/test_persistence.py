"""Checkpoints and the teacher cache: round trips, verification, and nothing partial on failure."""

import weakref

import pytest
import torch

from spanlift.errors import CacheError, CheckpointError
from spanlift.platform.fitting.fit import FitSettings, fit
from spanlift.platform.sampling import teacher as teacher_module
from spanlift.platform.sampling.rollout import seed_noise
from spanlift.platform.sampling.teacher import (
    DEFAULT_TEACHER,
    generate_teacher,
    load_or_generate,
    teacher_key,
)
from spanlift.solvers import SolverSpec, build_solver, read_checkpoint, save_solver
from spanlift.solvers.checkpoint import load_solver_state

from .conftest import noise_like


def build(gmm, spec):
    return build_solver(spec, gmm.sigma_min, gmm.sigma_max, 1)


@pytest.mark.parametrize(
    "spec",
    [
        SolverSpec("dyweight", 3),
        SolverSpec("spanlift", 3, settings={"base": "ipndm", "hidden_dim": 8}),
    ],
)
def test_checkpoint_round_trip(gmm, gmm_teacher, tmp_path, spec):
    solver = build(gmm, spec)
    fit(solver, gmm, gmm_teacher[0], FitSettings(iterations=5), progress=False)
    path = save_solver(tmp_path / "solver.pt", solver, {"rmse": 0.1})
    payload = read_checkpoint(path)
    loaded = build(gmm, SolverSpec.from_dict(payload["spec"]))
    loaded.load_state_dict(payload["state"])
    x = gmm.prior(noise_like(gmm, 4))
    with torch.no_grad():
        assert torch.equal(solver(gmm.denoise, x), loaded(gmm.denoise, x))
    assert payload["metadata"] == {"rmse": 0.1}


def test_spanlift_loads_a_fitted_base(gmm, gmm_teacher, tmp_path):
    base = build(gmm, SolverSpec("dyweight", 3))
    fit(base, gmm, gmm_teacher[0], FitSettings(iterations=5), progress=False)
    path = save_solver(tmp_path / "base.pt", base)
    lifted = build(
        gmm, SolverSpec("spanlift", 3, settings={"base_checkpoint": str(path), "hidden_dim": 8})
    )
    assert torch.equal(lifted.base.weights, base.weights)
    assert not lifted.base.weights.requires_grad


def test_missing_and_corrupt_checkpoints(gmm, tmp_path):
    with pytest.raises(CheckpointError, match=r"missing\.pt"):
        read_checkpoint(tmp_path / "missing.pt")
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match=r"garbage\.pt"):
        read_checkpoint(garbage)
    truncated = tmp_path / "truncated.pt"
    data = save_solver(tmp_path / "full.pt", build(gmm, SolverSpec("dyweight", 3))).read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"truncated\.pt"):
        read_checkpoint(truncated)
    with pytest.raises(CheckpointError, match="'dyweight', expected 'ipndm'"):
        load_solver_state(tmp_path / "full.pt", expected="ipndm")
    with pytest.raises(CheckpointError, match=r"nowhere\.pt"):
        build(
            gmm,
            SolverSpec("spanlift", 3, settings={"base_checkpoint": str(tmp_path / "nowhere.pt")}),
        )


def test_cache_is_reused_not_regenerated(gmm, tmp_path, monkeypatch):
    first = load_or_generate(tmp_path, gmm, range(40), progress=False)

    def refuse(*args, **kwargs):
        raise AssertionError("the teacher was generated again")

    monkeypatch.setattr(teacher_module, "generate_teacher", refuse)
    second = load_or_generate(tmp_path, gmm, range(40), progress=False)
    assert torch.equal(first.endpoints, second.endpoints) and torch.equal(first.noise, second.noise)
    assert torch.equal(second.seeds, torch.arange(40))


def test_cache_key_covers_seeds_teacher_and_backbone(gmm):
    key = teacher_key(gmm, DEFAULT_TEACHER, range(10))
    assert key != teacher_key(gmm, DEFAULT_TEACHER, range(11))
    assert key != teacher_key(gmm, SolverSpec("ipndm", 36, settings={"order": 4}), range(10))
    other = type(gmm)(seed=1)
    assert key != teacher_key(other, DEFAULT_TEACHER, range(10))


def test_corrupt_entry_is_detected(gmm, tmp_path):
    load_or_generate(tmp_path, gmm, range(20), progress=False)
    (entry,) = tmp_path.glob("teacher-*/teacher.arrow")
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.write_bytes(bytes(data))
    with pytest.raises(CacheError, match=r"teacher\.arrow is corrupt"):
        load_or_generate(tmp_path, gmm, range(20), progress=False)


def test_crash_while_writing_leaves_nothing(gmm, tmp_path, monkeypatch):
    real_write = teacher_module.write_entry_file

    def write_then_crash(path, batch):
        real_write(path, batch)
        raise OSError("disk full")

    monkeypatch.setattr(teacher_module, "write_entry_file", write_then_crash)
    with pytest.raises(OSError, match="disk full"):
        load_or_generate(tmp_path, gmm, range(30), progress=False)
    assert list(tmp_path.iterdir()) == []


def test_noise_depends_only_on_its_seed():
    together = seed_noise([5, 6, 7], (1, 4, 4))
    alone = seed_noise([6], (1, 4, 4))
    assert torch.equal(together[1], alone[0])


def test_teacher_keeps_no_earlier_states_without_state_sigmas(gmm, monkeypatch):
    """Endpoints only: while the teacher rolls out a batch, the states of its earlier steps are
    freed once its history no longer reads them (not kept to the end of the batch)."""
    denoise, alive, most = gmm.denoise, [], 0

    def counting(x, sigma, cond=None):
        nonlocal most
        alive.append(weakref.ref(x))
        most = max(most, sum(ref() is not None for ref in alive))
        return denoise(x, sigma)

    monkeypatch.setattr(gmm, "denoise", counting)
    teacher = SolverSpec("ipndm", nfe=35, settings={"order": 4})
    result = generate_teacher(gmm, range(8), teacher, progress=False)
    assert len(alive) == 35 and result.endpoints.shape == (8, *gmm.shape)
    assert most <= 6  # iPNDM(4): the states its history of 4 points holds, and the current one
