"""Validation seeds added only while the kept-state comparison is undecided: blocks of teacher
endpoints generated when a comparison needs them, the sequential test's stated error rates."""

import warnings

import numpy as np
import pytest
import torch

from spanlift.platform.fitting.fit import FitSettings, fit
from spanlift.platform.fitting.resolution import ResolutionWarning
from spanlift.platform.fitting.sequential import (
    ALPHA,
    GAIN,
    NEGLIGIBLE,
    NO_GAIN,
    UNDECIDED,
    early_decision,
    early_order,
)
from spanlift.platform.sampling.validation_blocks import ValidationBlocks, block_ranges
from spanlift.seeds import VALIDATION_SAMPLES, role_seeds
from spanlift.solvers import SolverSpec, build_solver


def test_blocks_double_the_seeds_so_far_up_to_the_cap():
    sizes = [len(r) for r in block_ranges(range(512, 512 + 8192))]
    assert sizes == [256, 256, 512, 1024, 2048, 4096]
    assert [len(r) for r in block_ranges(range(1000))] == [256, 256, 488]
    assert block_ranges(range(7, 37)) == [range(7, 37)]


def fitted(gmm, train, cache, nfe: int, iterations: int):
    """DyWeight fitted `iterations` steps on the mixture, validated once at the end on lazily
    generated validation blocks; (result, blocks)."""
    seeds = role_seeds(len(train), VALIDATION_SAMPLES, 0)["validation"]
    blocks = ValidationBlocks(cache, gmm, seeds, progress=False)
    solver = build_solver(SolverSpec("dyweight", nfe), gmm.sigma_min, gmm.sigma_max, channels=1)
    settings = FitSettings(
        iterations=iterations, batch_size=16, warmup=0, validate_every=iterations
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResolutionWarning)
        result = fit(solver, gmm, train, settings, progress=False, validation=blocks)
    return result, blocks


def test_a_resolved_gain_stops_at_the_first_block(gmm, gmm_teacher, tmp_path):
    """A fit that gains ~20 % is kept on the first 256 seeds; no other block is generated."""
    result, blocks = fitted(gmm, gmm_teacher[0], tmp_path, nfe=4, iterations=20)
    assert result.best_iteration == 20
    assert sorted(blocks.loaded) == [0] and result.validation_seeds == 256
    assert len(list(tmp_path.glob("teacher-*"))) == 1


def test_an_undecided_gain_adds_blocks_until_the_rule_decides(gmm, gmm_teacher, tmp_path):
    """A gain of a few percent is neither shown nor ruled out on 256 seeds: blocks are added
    (and the starting state measured on each) up to the cap, where the state is kept."""
    result, blocks = fitted(gmm, gmm_teacher[0], tmp_path, nfe=5, iterations=5)
    assert sorted(blocks.loaded) == list(range(blocks.count))
    assert result.validation_seeds == VALIDATION_SAMPLES and result.best_iteration == 5
    again, _ = fitted(gmm, gmm_teacher[0], tmp_path, nfe=5, iterations=5)  # from the cache
    assert again.validation == result.validation and again.validation_seeds == VALIDATION_SAMPLES


def test_a_worse_state_needs_no_more_seeds(gmm, gmm_teacher, tmp_path):
    result, blocks = fitted(gmm, gmm_teacher[0], tmp_path, nfe=5, iterations=2)
    assert result.best_iteration == 0 and result.validation[2] > result.validation[0]
    assert sorted(blocks.loaded) == [0] and result.validation_seeds == 256


def groups(mean_gain: float, spread: float, count: int, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    start = 1.0 + 0.1 * rng.standard_normal(count)
    later = start - mean_gain + spread * rng.standard_normal(count)
    return torch.tensor(start), torch.tensor(later)


def test_an_early_look_decides_a_clear_gain_a_clear_futility_and_waits_between():
    assert early_decision(*groups(0.2, 0.05, 32, 0), looks=6) == GAIN
    assert early_decision(*groups(-0.01, 0.01, 32, 1), looks=6) == NO_GAIN
    assert early_decision(*groups(0.04, 0.15, 32, 2), looks=6) == UNDECIDED


def test_against_the_kept_state_an_early_look_orders_clear_and_negligible_differences():
    """kept − later: better or worse beyond the bounds; within 2 % either way, the lower."""
    assert early_order(*groups(0.2, 0.05, 32, 0), looks=6) == GAIN
    assert early_order(*groups(-0.2, 0.05, 32, 0), looks=6) == NO_GAIN
    kept, later = groups(0.002, 0.001, 32, 3)
    assert early_order(kept, later, looks=6) == GAIN  # a shown gain of 0.2 %
    assert early_order(kept, kept + 0.001 * torch.randn(32, dtype=torch.float64), 6) in (
        GAIN,
        NO_GAIN,
    )
    assert early_order(*groups(0.01, 0.15, 32, 2), looks=6) == UNDECIDED


@pytest.mark.parametrize("mean_gain, decided", [(0.0, GAIN), (NEGLIGIBLE, NO_GAIN)])
def test_each_early_error_rate_is_at_most_alpha_over_all_early_looks(mean_gain, decided):
    """A state with no gain is kept early, and one with the futile gain rejected early, in at
    most ALPHA of 2 000 simulated sequential comparisons (6 looks; 32 groups a block)."""
    rng, looks, errors = np.random.default_rng(0), 6, 0
    for _ in range(2000):
        start = 1.0 + 0.3 * rng.standard_normal(32 * looks)
        later = start - mean_gain + 0.5 * rng.standard_normal(32 * looks)
        for look in range(1, looks):
            n = 32 * look
            verdict = early_decision(torch.tensor(start[:n]), torch.tensor(later[:n]), looks)
            if verdict != UNDECIDED:
                errors += verdict == decided
                break
    assert errors / 2000 <= ALPHA
