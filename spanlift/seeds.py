"""Which seeds play which part. A seed fixes a sample's noise (and, for conditional backbones, its
conditioning), so the ranges never overlap:

    [0, 10⁹)          training seeds: teacher endpoints a solver is fitted on
    [10⁹, 2·10⁹)      held-out test seeds: endpoint RMSE, nowcasting skill
    [2·10⁹, 3·10⁹)    FID and other sample metrics (`spanlift eval --seed-offset` starts them
                      elsewhere, e.g. at 0 for EDM's `generate.py` seeds)
    [3·10⁹, …)        the teacher's own samples as an FID reference

A conditional backbone maps training seeds to its training data and every other seed to its
held-out data (`held_out`).
"""

TEST_SEED_OFFSET = 10**9
FID_FIRST_SEED = 2 * 10**9
REFERENCE_FIRST_SEED = 3 * 10**9


def held_out(seed: int) -> bool:
    """Whether `seed` is outside the training range (its conditioning comes from held-out data)."""
    return seed >= TEST_SEED_OFFSET


RANGE_STARTS = (0, TEST_SEED_OFFSET, FID_FIRST_SEED, REFERENCE_FIRST_SEED)


def offset_in_range(seed: int) -> int:
    """How far `seed` is from the first seed of its range (so each range can start again at the
    first item of a list, e.g. the first evaluation prompt)."""
    return seed - max(first for first in RANGE_STARTS if first <= seed)
