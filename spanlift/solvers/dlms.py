"""DLMS: learned linear multistep coefficients on a fixed grid, fitted to the teacher's trajectory.

    x_{i+1} = x_i + h_i Σ_{j ≤ min(i, K−1)} c_{i,j} d_{i−j},     c initialised to iPNDM(K),

with the schedule's grid kept fixed. Where S4S matches only the endpoint, DLMS is supervised at
every grid point: a fit matches its states x_1 … x_N at σ_1 … σ_N to the teacher's states there
(`supervision = "trajectory"`).
An untrained DLMS is iPNDM of order K. One NFE per step (minus one with AFS).
"""

from typing import ClassVar

from spanlift.solvers.registry import SOLVERS
from spanlift.solvers.s4s_alt import LearnedMultistep


@SOLVERS.register("dlms")
class DLMS(LearnedMultistep):
    """DLMS: Δ_i = Σ_j c_{i,j} d_{i−j} (init iPNDM) on the fixed grid, trajectory supervision."""

    citation = "Liang et al., ICLR 2025 (DLMS)"
    title = "DLMS"
    supervision: ClassVar[str] = "trajectory"
