"""The kept-state rule as a sequential test: validation seeds are added only while the comparison
of a later state with the starting state is undecided.

The validation seeds come in K blocks (`sampling/validation_blocks.py`: 256 seeds, then blocks
that double the seeds so far, up to the cap), so the comparison looks at n = 256, 512, 1 024, …,
N seeds. At a look, over the G groups of the blocks used so far (min(32, block) groups a block),

    d_g = L_0,g − L_t,g,   d̄ = mean_g d_g,   se = sd_g(d_g) / √G,   L̄_0 = mean_g L_0,g,

a comparison is decided, at each of the K − 1 early looks, as

    gain        when d̄ − c · se > 0                      (the gain's lower bound is above 0)
    no gain     when (d̄ + c · se) / L̄_0 < FUTILE_GAIN     (the relative gain's upper bound is below
                                                          the gain worth its teacher)
    undecided   otherwise: the next block is added,

with c = z_{1 − ALPHA / (K − 1)} (the standard normal quantile). At the last look (all N seeds,
or a validation set of one block, as a sweep's) the fixed-sample rule decides, as it always did:
gain when d̄ > k · se (`fit.earns_its_place`, k = NOISE_MULTIPLE).

Error rates, for one comparison, with d̄ / se taken as normal: a later state with no gain
(E d ≤ 0) is kept at an early look with probability at most ALPHA, and one whose relative gain is
FUTILE_GAIN or more is rejected at an early look with probability at most ALPHA (each look's
one-sided test at ALPHA / (K − 1); Bonferroni over the early looks). What reaches the last look
meets the fixed-sample rule's own rate (a later state with no gain passes one standard error
about one time in six). The early gain bound is stricter than that rule, so a gain kept early is
one that the full validation set would keep too, but for the same small chance.
"""

import math
from statistics import NormalDist

from torch import Tensor

from spanlift.platform.fitting.resolution import WANTED_GAIN

ALPHA = 0.05
"""Each early error rate of a comparison (module docstring), over all its early looks."""
FUTILE_GAIN = WANTED_GAIN
"""A relative gain below which a later state is not worth more validation seeds: shown (at the
early looks' bound) to be below it, the comparison ends with the starting state kept."""

GAIN, NO_GAIN, UNDECIDED = "gain", "no gain", "undecided"


def early_bound(looks: int) -> float:
    """c = z_{1 − ALPHA / (looks − 1)}: the standard errors of an early look's bounds."""
    return NormalDist().inv_cdf(1 - ALPHA / max(1, looks - 1))


def early_decision(start: Tensor, later: Tensor, looks: int) -> str:
    """GAIN, NO_GAIN or UNDECIDED at an early look (of `looks`) for a later state's group losses
    `later` against the starting state's `start`, the same groups (module docstring); the last
    look is the fixed-sample rule's (`fit.earns_its_place`)."""
    gain = (start - later).double()
    if len(gain) < 2:
        return UNDECIDED
    mean, error = float(gain.mean()), float(gain.std()) / math.sqrt(len(gain))
    bound = early_bound(looks) * error
    if mean - bound > 0:
        return GAIN
    if mean + bound < FUTILE_GAIN * float(start.double().mean()):
        return NO_GAIN
    return UNDECIDED
