"""What a fit's validation seeds can tell apart: the smallest relative gain its kept-state rule
resolves, and a warning when that is coarser than the gains a fit is after.

The kept-state rule (`fit.earns_its_place`) keeps a later state t over the starting state only
when, over the same G = min(32, n) groups of the n validation seeds,

    mean_g d_g > k · sd_g(d_g) / √G,      d_g = L_0,g − L_t,g,   k = NOISE_MULTIPLE (1),

that is, relative to the starting loss, when the gain mean_g d_g / mean_g L_0,g exceeds
k · sd_g(d_g) / (√G · mean_g L_0,g). Before any later state exists the spread of the gains is
taken to be the spread of the starting losses themselves, sd(d) = sd(L_0), which gives the
validation set's resolution, known from the first validation on:

    resolves = k · sd_g(L_0,g) / (√G · mean_g L_0,g)        (sd with n − 1, as the rule's)

Measured on the mixture (DyWeight fitted 1 000 iterations at NFE 3–6, 1 024 validation seeds),
the kept states' gains spread 0.82–0.95 times as much as the starting losses: the rule then asks
for a little less than `resolves`; a gain well below it is not told apart from noise. The
standard error falls as 1/√n, so a relative gain r needs about n · (resolves / r)² seeds.
"""

import math
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

WANTED_GAIN = 0.05
"""The relative gain a choice should be able to resolve; fewer seeds than that needs: a warning."""


class ResolutionWarning(UserWarning):
    """A choice made on fewer validation seeds than it needs to resolve `WANTED_GAIN`."""


def resolves(start: "Tensor", multiple: float) -> float | None:
    """k · sd_g(L_0,g) / (√G · mean_g L_0,g) for the starting state's group losses `start` and
    the rule's multiple k (module docstring); None with fewer than two groups or a starting loss
    of zero (the rule then accepts any gain)."""
    losses = start.double()
    if len(losses) < 2 or not float(losses.mean()) > 0:
        return None
    return float(multiple * losses.std() / (math.sqrt(len(losses)) * losses.mean()))


def seeds_needed(resolution: float, seeds: int, gain: float = WANTED_GAIN) -> int:
    """The validation seeds that resolve a relative `gain`, from the `resolution` of `seeds`:
    ⌈seeds · (resolution / gain)²⌉."""
    return math.ceil(seeds * (resolution / gain) ** 2)


def warn_if_coarse(resolution: float | None, seeds: int, gain: float = WANTED_GAIN) -> None:
    """One line (`ResolutionWarning`) when `seeds` validation seeds resolve only gains above
    `gain`."""
    if resolution is None or resolution <= gain:
        return
    warnings.warn(
        f"the kept state is chosen on {seeds} validation seeds, which resolve gains above "
        f"{resolution:.1%} of the starting loss; a {gain:.0%} gain needs about "
        f"{seeds_needed(resolution, seeds, gain)} (validation_samples)",
        ResolutionWarning,
        stacklevel=2,
    )
