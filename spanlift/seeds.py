"""Which seeds play which part. A seed fixes a sample's noise (and, for conditional backbones, its
conditioning), so the roles never share a seed:

    [0, T)              training seeds: teacher endpoints a solver is fitted on
    [T, T + V)          validation seeds: every choice (the fit's kept state, the searcher, the
                        leaderboard's configuration per solver); validation sample metrics (FID
                        for a search) continue this range
    [10⁹, 2·10⁹)        held-out test seeds: endpoint RMSE, nowcasting skill (reported only)
    [2·10⁹, 3·10⁹)      FID and other sample metrics (`spanlift eval --seed-offset` starts them
                        elsewhere, e.g. at 0 for EDM's `generate.py` seeds)
    [3·10⁹, …)          the teacher's own samples as an FID reference

T and V are a sweep's `teacher.train_samples` and `teacher.validation_samples` (for `spanlift fit`
and a comparison in Python, V defaults to `VALIDATION_SAMPLES`). Validation seeds
lie in the training range, so a conditional backbone draws them from its training data, never from
its held-out data (which the test seeds use), and from other rows of it than the training seeds
while T + V is at most the data's size. A conditional backbone maps training-range seeds to its
training data and every other seed to its held-out data (`held_out`).
"""

from collections.abc import Sequence

from spanlift.errors import SettingsError

TEST_SEED_OFFSET = 10**9
VALIDATION_SAMPLES = 8192
"""Validation seeds of `spanlift fit` and of a comparison in Python (`fitting/compare.py` given
`sampling/validation_blocks.ValidationBlocks`) unless told otherwise: the most a comparison of the
kept-state rule may use, enough to resolve a 5 % gain over the starting state on the embedded
backbones at NFE 3–6 (`fitting/resolution.py`; docs/results.md). They come in blocks, generated
only while a comparison is undecided (`fitting/sequential.py`). A sweep's default stays
`teacher.validation_samples` (256), used whole."""
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


def role_seeds(train: int, validation: int, test: int) -> dict[str, range]:
    """The seeds of each role for `train`, `validation` and `test` samples (module docstring)."""
    return {
        "train": range(train),
        "validation": range(train, train + validation),
        "test": range(TEST_SEED_OFFSET, TEST_SEED_OFFSET + test),
    }


def validation_after(train: Sequence[int], count: int) -> range:
    """`count` validation seeds following training seeds `train` (`role_seeds`' validation
    range when `train` is 0 … T − 1); refused where they would reach the test seeds."""
    last = max(train, default=-1)
    seeds = role_seeds(last + 1, count, 0)["validation"]
    if seeds.stop > TEST_SEED_OFFSET:
        raise SettingsError(
            f"{count} validation seeds after training seed {last} would reach the test seeds "
            f"({TEST_SEED_OFFSET}…); pass a validation set"
        )
    return seeds


def describe(seeds: range) -> str:
    """A seed range as a run records it, e.g. `1000000000..1000000255 (256)`."""
    return f"{seeds.start}..{seeds.stop - 1} ({len(seeds)})" if len(seeds) else "none"
