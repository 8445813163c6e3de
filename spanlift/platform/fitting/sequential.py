"""The kept-state rule as a sequential test: validation seeds are added only while a choice of
the kept state is undecided.

The validation seeds come in K blocks (`sampling/validation_blocks.py`: 256 seeds, then blocks
that double the seeds so far, up to the cap), so a choice looks at n = 256, 512, 1 024, …, N
seeds. A later state t faces two paired comparisons over the G groups of the blocks used so far
(min(32, block) groups a block), each with

    d_g = L_a,g − L_t,g,   d̄ = mean_g d_g,   se = sd_g(d_g) / √G,   c = z_{1 − ALPHA / (K − 1)}:

against the starting state (a = 0), at each of the K − 1 early looks

    gain        when d̄ − c · se > 0                          (the gain's lower bound above 0)
    no gain     when (d̄ + c · se) / L̄_0 < NEGLIGIBLE          (its upper bound below what matters)

and against the state kept so far (a = k, when it is not the starting state)

    better      when d̄ − c · se > 0, worse when d̄ + c · se < 0, and, when the whole interval
                |d̄| + c · se is below NEGLIGIBLE · L̄_k, the lower on these seeds (either will do);

undecided otherwise: the next block is added. It is kept when it gains over the start and is
better than the kept state. At the last look (all N seeds, or a validation set of one block, as a
sweep's) the fixed-sample rule decides, as it always did: the lower mean, and a gain over the
start of more than k · se (`fit.earns_its_place`, k = NOISE_MULTIPLE).

Error rates, for one comparison, with d̄ / se taken as normal, each at most ALPHA over all the
early looks (each look's one-sided bound at ALPHA / (K − 1); Bonferroni): a state with no gain is
kept early; one whose gain is NEGLIGIBLE or more is rejected early; a state worse than the kept
one by more than NEGLIGIBLE of its loss replaces it early (or one better by as much is passed
over). NEGLIGIBLE = 2 % of the loss (an MSE) is 1 % of an RMSE. What reaches the last look meets
the fixed-sample rule's own rate (a state with no gain passes one standard error about one time
in six).
"""

import math
from statistics import NormalDist

from torch import Tensor

ALPHA = 0.05
"""Each early error rate of a comparison (module docstring), over all its early looks."""
NEGLIGIBLE = 0.02
"""A relative difference in loss that does not matter to a choice (2 % of an MSE is 1 % of an
RMSE): a gain over the start shown to be below it, or two states shown to be within it of each
other, need no more validation seeds."""

GAIN, NO_GAIN, UNDECIDED = "gain", "no gain", "undecided"


def early_bound(looks: int) -> float:
    """c = z_{1 − ALPHA / (looks − 1)}: the standard errors of an early look's bounds."""
    return NormalDist().inv_cdf(1 - ALPHA / max(1, looks - 1))


def bounds(first: Tensor, second: Tensor, looks: int) -> tuple[float, float] | None:
    """(d̄, c · se) of d_g = first_g − second_g at an early look of `looks`; None with fewer
    than two groups."""
    gain = (first - second).double()
    if len(gain) < 2:
        return None
    return float(gain.mean()), early_bound(looks) * float(gain.std()) / math.sqrt(len(gain))


def interval_verdict(first: Tensor, later: Tensor, looks: int, below: float) -> str:
    """GAIN when d̄ − c · se > 0 (d_g = first_g − later_g), NO_GAIN when d̄ + c · se < `below`,
    else UNDECIDED (also with fewer than two groups)."""
    found = bounds(first, later, looks)
    if found is None:
        return UNDECIDED
    mean, bound = found
    if mean - bound > 0:
        return GAIN
    return NO_GAIN if mean + bound < below else UNDECIDED


def early_decision(start: Tensor, later: Tensor, looks: int) -> str:
    """GAIN, NO_GAIN or UNDECIDED at an early look (of `looks`) for a later state's group losses
    `later` against the starting state's `start`, the same groups (module docstring); the last
    look is the fixed-sample rule's (`fit.earns_its_place`)."""
    return interval_verdict(start, later, looks, NEGLIGIBLE * float(start.double().mean()))


def early_order(kept: Tensor, later: Tensor, looks: int) -> str:
    """GAIN (the later state is better), NO_GAIN (it is not) or UNDECIDED at an early look for
    its group losses against the kept state's (module docstring): two states within NEGLIGIBLE
    of each other are ordered by these seeds."""
    decided, found = interval_verdict(kept, later, looks, 0.0), bounds(kept, later, looks)
    if decided != UNDECIDED or found is None:
        return decided
    mean, bound = found
    if abs(mean) + bound < NEGLIGIBLE * float(kept.double().mean()):
        return GAIN if mean > 0 else NO_GAIN
    return UNDECIDED
