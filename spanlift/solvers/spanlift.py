"""SpanLift: a base multistep solver plus a learned residual operator (the paper, eq. 9–10).

    x_{i+1} = x_i + h_i (α_i Δ_i^base + β_i R_φ(X̃_i; ξ_i)),
    X̃_i = concat(x_i / sqrt(1 + σ_i²), d_i, d_{i−1}, …, d_{i−K+1})     (missing d's are zero),
    ξ_i = (t_i, λ_i, h^λ_i) = (i / N, −2 ln σ_i / 10, (λ_{i+1} − λ_i) / 10).

A last step to σ = 0 (the `edm_to_zero` schedule) has λ_{i+1} = ∞; ξ reads that σ as
SIGMA_FEATURE_FLOOR = 10⁻⁴ instead, so the operator's input stays finite.

Any registered solver can be the base; it is frozen by default (the in-span prior), and a trained
learned base is loaded from `base_checkpoint`. α_i = 1 and β_i = `beta_init` (0) at init, so an
untrained SpanLift is its base solver. R_φ adds no model evaluations: NFE is the base's NFE.

SpanLift steps on its base's grid: every σ_i (in h_i, X̃_i and ξ_i) is read through the base's
`sigma(i)`, so a base with a learned grid (LD3, S4S-Alt) carries SpanLift onto that grid.
"""

from typing import Any

import torch
from torch import Tensor, nn

from spanlift.errors import SettingsError
from spanlift.solvers.base import Denoiser, History
from spanlift.solvers.capabilities import TakesSubsteps
from spanlift.solvers.grid import Grid
from spanlift.solvers.on_base import OnBase
from spanlift.solvers.operators import OPERATORS, check_positive
from spanlift.solvers.registry import SOLVERS

SIGMA_FEATURE_FLOOR = 1e-4


@SOLVERS.register("spanlift")
class SpanLift(OnBase):
    """SpanLift: base solver + FiLM-conditioned residual operator (scalar / pointwise / spatial).

    Its step has parts (`capabilities.HasParts`: `parts`, `part_weights`)."""

    citation = "the SpanLift paper"
    title = "SpanLift"
    reference = "this package"

    def __init__(
        self,
        sigmas: Tensor | Grid,
        channels: int = 1,
        base: str = "dyweight",
        base_settings: dict[str, Any] | None = None,
        base_checkpoint: str | None = None,
        freeze_base: bool = True,
        operator: str = "spatial",
        kernel_size: int = 3,
        hidden_dim: int = 64,
        blocks: int = 2,
        history: int = 3,
        beta_init: float = 0.0,
    ) -> None:
        super().__init__(
            sigmas, channels, base, base_settings, base_checkpoint, trainable=not freeze_base
        )
        if isinstance(self.base, TakesSubsteps):
            raise SettingsError(
                f"spanlift cannot take {base!r} as its base: {base} steps through substeps, not "
                "x + h·Δ, so there is no Δ to add to"
            )
        self.history = check_positive("history", history)
        self.buffer_size = max(self.base.buffer_size, history)
        self.operator = OPERATORS.get(operator)(
            channels=channels,
            history=history,
            steps=self.num_steps,
            kernel_size=kernel_size,
            hidden_dim=hidden_dim,
            blocks=blocks,
        )
        self.alpha = nn.Parameter(torch.ones(self.num_steps))
        self.beta = nn.Parameter(torch.full((self.num_steps,), float(beta_init)))

    def operator_input(self, i: int, x: Tensor, history: History) -> tuple[Tensor, Tensor]:
        """(X̃_i, ξ_i) as in the module docstring."""
        sigma = self.sigma(i, x)
        derivatives = [p.derivative for p in history[: self.history]]
        derivatives += [torch.zeros_like(x)] * (self.history - len(derivatives))
        features = torch.cat([x / (1 + sigma**2).sqrt(), *derivatives], dim=1)
        # ξ in the grid's precision (float64), cast to x's dtype at the end
        lam = -2 * self.sigma(i, self.sigmas).log()
        lam_next = -2 * self.sigma(i + 1, self.sigmas).clamp(min=SIGMA_FEATURE_FLOOR).log()
        t = torch.tensor(i / self.num_steps, dtype=lam.dtype, device=lam.device)
        xi = torch.stack([t, lam / 10, (lam_next - lam) / 10])
        return features, xi.to(x.dtype)

    def parts(
        self, i: int, x: Tensor, history: History, denoiser: Denoiser
    ) -> tuple[Tensor, Tensor]:
        """(Δ_i^base, Δ_i^op) before the α, β scaling."""
        base = self.base.direction(i, x, history[: self.base.buffer_size], denoiser)
        return base, self.operator(*self.operator_input(i, x, history), i)

    def part_weights(self, i: int) -> tuple[Tensor, Tensor]:
        """(α_i, β_i): how much of each part the step takes."""
        return self.alpha[i], self.beta[i]

    def direction(self, i: int, x: Tensor, history: History, denoiser: Denoiser) -> Tensor:
        base, op = self.parts(i, x, history, denoiser)
        return self.alpha[i].to(x.dtype) * base + self.beta[i].to(x.dtype) * op
