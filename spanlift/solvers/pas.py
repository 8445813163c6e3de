"""PAS (Wang et al., ICML 2025, "Diffusion Sampling Correction via Approximately 10 Parameters"):
a base solver whose direction is corrected, at chosen steps, inside a PCA basis of the trajectory.

At a corrected step i the base's direction Δ_i is rewritten in an orthonormal basis u_1 … u_K of
the sampling trajectory:

    rows   = (x_T, Δ'_0, …, Δ'_{i−1}, Δ_i)     (x_T only with `start`; Δ'_j the directions taken),
    v_2 … v_K = the top K − 1 right singular vectors of the rows, centred (their mean removed),
    u_1 = Δ_i / ‖Δ_i‖,   u_k = GS(v_k; u_1 … u_{k−1}) / ‖·‖,   u_k ← −u_k unless ⟨x_i − x_T, u_k⟩ > 0,
    Δ'_i = ‖Δ_i‖ Σ_k c_{i,k} u_k = c_{i,1} Δ_i + ‖Δ_i‖ Σ_{k≥2} c_{i,k} u_k,

per sample (GS: Gram–Schmidt against the earlier u; ‖·‖ over the whole sample; at step 0, where
x_i − x_T = 0, u_k ← −u_k unless ⟨x_T, u_k⟩ > 0). c (one row of K
coordinates per corrected step) is learned, initialised to (1, 0, …, 0), so an untrained PAS is
its base exactly. The basis is held constant in the gradient (as in the reference, which computes
it from stored, detached states). n rows centred span at most n − 1 principal directions, so a
step has its K − 1 from i ≥ K − 1 − [start] on; as in the authors' search and sampler, a step
with only K − 1 rows (i = K − 2 − [start]) is corrected too, with its K − 2 principal directions:
its u_K, which the rows leave undetermined, is 0 here (c_{i,K} does nothing there). So every step
from i = max(0, K − 2 − [start]) can be corrected (with x_T and K = 4, the authors' setting, from
step 1). `corrected` lists the steps (default: every step that can be); a grid with none (K = 4
without x_T on two steps) is refused when PAS is built, since it would leave PAS nothing to fit.
The directions taken are read back from the history, Δ'_j = (x_{j+1} − x_j) / h_j, so the rows are
the trajectory actually followed, whatever solver PAS sits in; its history keeps all N points.
No model evaluations are added: NFE is the base's.

Against the reference (onefly123/PAS): it fits each corrected step in turn against the teacher's
state at the next grid point (L1 by default), from its own corrected state, and keeps a step only
if the loss falls by more than a tolerance; here the corrected steps are a setting and all their
coordinates are fitted together through the rollout, supervised by the teacher's states at every
grid point (`supervision = "trajectory"`, the loss the fit settings name). Its coordinates are
absolute (c_1 starts at the mean ‖Δ_i‖ of its training set, shared by all samples); here they
scale each sample's ‖Δ_i‖, which is what makes the untrained PAS its base. Its PCA is
`torch.pca_lowrank` (randomised: exact only while the rows are at most K); here an exact SVD. At a
step with K − 1 rows its last principal direction lies in the null space of the centred rows, and
its u_K is whatever unit vector orthogonal to the rows that PCA returns (with a sign set by a
rounding-level inner product; for K = 4 it changes from call to call), scaled by c_{i,K}; here
that term is left out. At step 0 (x_i = x_T) its flip leaves each u_k the sign its PCA gave, which
changes from sample to sample; here they point towards x_T.
Its sampler also appends the uncorrected Δ_i to the rows at a corrected step (its training does
not); here the rows are those of its training: the directions taken.
"""

from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from spanlift.errors import SettingsError
from spanlift.solvers.base import Denoiser, History
from spanlift.solvers.capabilities import TakesSubsteps
from spanlift.solvers.grid import Grid
from spanlift.solvers.on_base import OnBase, searches
from spanlift.solvers.registry import SOLVERS


def unit(v: Tensor) -> Tensor:
    """v / ‖v‖ per row (a zero row stays zero)."""
    return v / v.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(v.dtype).tiny)


def pca_basis(rows: Tensor, direction: Tensor, flip: Tensor, components: int) -> Tensor:
    """u_1 … u_K (B, K, D) from `rows` (B, n, D), the direction Δ (B, D) and x_i − x_T (B, D):
    u_1 = Δ/‖Δ‖, then the top min(K, n) − 1 principal directions of the centred rows (exact SVD),
    Gram–Schmidt orthonormalised against the earlier u and flipped to ⟨x_i − x_T, u_k⟩ > 0; the
    u_k the rows leave undetermined (n < K) are 0."""
    basis = [unit(direction)]
    determined = min(components, rows.shape[1]) - 1  # n centred rows span n − 1 directions
    if determined > 0:
        centred = rows - rows.mean(dim=1, keepdim=True)
        principal = torch.linalg.svd(centred, full_matrices=False).Vh[:, :determined]
        for k in range(determined):
            v = principal[:, k]
            for u in basis:
                v = v - (u * v).sum(-1, keepdim=True) * u
            v = unit(v)
            basis.append(torch.where((flip * v).sum(-1, keepdim=True) > 0, v, -v))
    basis += [torch.zeros_like(basis[0])] * (components - len(basis))
    return torch.stack(basis, dim=1)


@SOLVERS.register("pas")
class PAS(OnBase):
    """PAS: the base's Δ in a PCA basis of the trajectory, from the first step with K − 1 rows on.

    Learned coordinates per corrected step; with x_T and K = 4 from step 1, as onefly123/PAS."""

    citation = "Wang et al., ICML 2025 (PAS)"
    title = "PAS"
    reference = "onefly123/PAS pca_utils/utils.py correction_d, PCA_process; pas_solvers.py"
    supervision: ClassVar[str] = "trajectory"

    def __init__(
        self,
        sigmas: Tensor | Grid,
        channels: int = 1,
        base: str = "euler",
        base_settings: dict[str, Any] | None = None,
        components: int = 4,
        start: bool = True,
        corrected: list[int] | None = None,
    ) -> None:
        super().__init__(sigmas, channels, base, base_settings)
        if searches(self.base):
            raise SettingsError(
                f"pas cannot take {base!r} as its base: its search moves the grid at which pas "
                "is matched to the teacher"
            )
        if isinstance(self.base, TakesSubsteps):
            raise SettingsError(
                f"pas cannot take {base!r} as its base: it steps through substeps, not x + h·Δ, "
                "so there is no Δ to correct"
            )
        if not isinstance(components, int) or not 1 <= components <= 4:
            raise SettingsError(
                f"pas components must be an integer from 1 to 4, got {components!r}"
            )
        self.components = components
        if not isinstance(start, bool):
            raise SettingsError(f"pas start must be true or false, got {start!r}")
        self.start = start
        self.rows = {step: row for row, step in enumerate(self.check_corrected(corrected))}
        """Corrected step → its row of `coordinates`."""
        self.buffer_size = max(self.base.buffer_size, self.num_steps)
        initial = torch.zeros(len(self.rows), components)
        initial[:, 0] = 1
        self.coordinates = nn.Parameter(initial)

    def first_correctable(self) -> int:
        """The first step with K − 1 rows: i + 1 + [start] ≥ K − 1 (the authors' rule)."""
        return max(0, self.components - 2 - int(self.start))

    def check_corrected(self, corrected: list[int] | None) -> list[int]:
        """The corrected steps: `corrected`, checked, or every step that has at least K − 1 rows;
        a grid with none is refused."""
        first, steps = self.first_correctable(), self.num_steps
        if first >= steps:
            raise SettingsError(
                f"pas corrects no step on {steps} steps of {self.base.name}: with components="
                f"{self.components} a step has the rows of its basis only from step {first} on; "
                "raise the nfe or lower components"
            )
        if corrected is None:
            return list(range(first, steps))
        valid = (
            isinstance(corrected, list | tuple)
            and len(corrected) > 0
            and all(
                isinstance(i, int) and not isinstance(i, bool) and first <= i < steps
                for i in corrected
            )
        )
        if not valid or len(set(corrected)) != len(corrected):
            raise SettingsError(
                f"pas corrected must list distinct steps from {first} to {steps - 1} (the steps "
                f"with {self.components - 1} rows or more for the basis), got {corrected!r}"
            )
        return sorted(corrected)

    def trajectory_rows(self, i: int, x: Tensor, history: History, direction: Tensor) -> Tensor:
        """(B, n, D): x_T (with `start`), the directions taken Δ'_0 … Δ'_{i−1}, and Δ_i."""
        states = [p.x.flatten(1) for p in reversed(history)]  # x_0 … x_i
        taken = [(states[j + 1] - states[j]) / self.step_size(j, x) for j in range(len(states) - 1)]
        rows = [states[0]] if self.start else []
        return torch.stack([*rows, *taken, direction.flatten(1)], dim=1)

    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        delta = self.base.direction(i, x, history[: self.base.buffer_size], denoiser)
        row = self.rows.get(i)
        if row is None:
            return delta
        with torch.no_grad():
            work = torch.promote_types(x.dtype, torch.float32)  # no SVD in half precision
            flat = delta.detach().flatten(1).to(work)
            rows = self.trajectory_rows(i, x, history, delta.detach()).to(work)
            start = history[-1].x  # x_T; at step 0, where x_i − x_T = 0, the flip is by x_T
            flip = (x - start if i > 0 else start).flatten(1).to(work)
            basis = pca_basis(rows, flat, flip, self.components)[:, 1:].to(x.dtype)
        c = self.coordinates[row].to(x.dtype)
        norm = delta.flatten(1).norm(dim=1, keepdim=True)
        correction = norm * torch.einsum("k,bkd->bd", c[1:], basis)
        return c[0] * delta + correction.reshape_as(delta)
