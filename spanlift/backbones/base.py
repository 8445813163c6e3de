"""What every frozen model adapter gives the solvers: a denoiser in EDM σ-form.

Solvers integrate dx/dσ = (x − D(x, σ)) / σ from σ_max to σ_min. A backbone turns its own
parameterisation into D (x0-prediction): VP/ε-prediction uses σ = sqrt((1−ᾱ)/ᾱ) and x̃ = x/√ᾱ;
flow matching with x_t = t·x1 + (1−t)·noise uses σ = (1−t)/t and x̃ = x/t.
"""

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

ACCELERATOR_BATCH = 256

PARAMETERISATIONS = ("denoiser", "flow")
"""What a diffusers-style sampling loop's model outputs and its timesteps are, for a backbone:
`denoiser`: D(x̃, σ) itself, at timestep σ, on the σ-form state x̃ (EDM's networks);
`flow`: the velocity v(x_s, s) on latents x_s = x̃/(1 + σ), at timestep s·T with s = σ/(1 + σ)
(SANA, FLUX: flow_matching.py)."""


@dataclass(frozen=True)
class PipelineForm:
    """How a backbone's model is called in a diffusers pipeline's loop: the parameterisation
    (PARAMETERISATIONS), the shape (C, h, w) of one sample, the scheduler's num_train_timesteps
    T (flow only) and whether the pipeline packs latents into 2×2 patches (FLUX)."""

    parameterisation: str
    shape: tuple[int, ...]
    train_timesteps: int | None = None
    packed: bool = False


class Backbone(nn.Module, ABC):
    """A frozen generative model seen through its denoiser D(x, σ, cond).

    Subclasses set `shape` (C, H, W of one sample), `sigma_min` and `sigma_max`.
    """

    name: ClassVar[str]
    """The name it is registered under (`BACKBONES.register`), which sets it: never restated."""
    shape: tuple[int, ...]
    sigma_min: float
    sigma_max: float
    fid_detector: str = "inception"  # the FID detector its samples are scored with by default
    needs: ClassVar[str] = "nothing: embedded, its weights ship with spanlift"
    """What a user must provide to load it (files, opt-ins), as `spanlift backbones` prints it."""
    cpu_batch: ClassVar[int] = ACCELERATOR_BATCH
    """Samples per denoiser call when sampling on a CPU: the batch it runs fastest at there. A
    convolutional net on small frames can run several times faster per sample in small batches,
    whose activations stay in the CPU's caches; on an accelerator large batches pay."""

    @abstractmethod
    def denoise(self, x: Tensor, sigma: Tensor, cond: Any = None) -> Tensor:
        """D(x, σ): the model's estimate of the clean sample. σ is a scalar or one per sample."""

    @abstractmethod
    def identity(self) -> str:
        """A string that changes whenever the model's outputs could change (name, weights digest)."""

    def prior(self, noise: Tensor) -> Tensor:
        """The starting state at σ_max for standard normal `noise`: x_T = σ_max · noise."""
        return noise * self.sigma_max

    def pipeline_form(self) -> PipelineForm:
        """Its model in a diffusers-style loop: D(x̃, σ) at timestep σ (`PARAMETERISATIONS`)."""
        return PipelineForm("denoiser", tuple(self.shape))

    def decode(self, x: Tensor) -> Tensor:
        """Map a sample to data space (identity in pixel space; a VAE decoder for latents)."""
        return x

    def to_images(self, x: Tensor) -> Tensor:
        """uint8 images (N, H, W, C) from samples in [-1, 1], as the EDM protocol: x·127.5 + 128."""
        pixels = (self.decode(x) * 127.5 + 128).clip(0, 255).to(torch.uint8)
        return pixels.permute(0, 2, 3, 1)

    def reference_images(self) -> Tensor | None:
        """The model's training images in [-1, 1] (N, C, H, W), the reference set of FID against
        the dataset; None when the backbone ships no dataset (use the teacher's samples)."""
        return None

    def prompts(self, seeds: Sequence[int]) -> list[str] | None:
        """The text prompt of each seed's sample (ImageReward scores image and prompt together);
        None for a backbone without prompts."""
        return None

    def conditioning(self, seeds: Sequence[int]) -> Tensor | None:
        """The conditioning of each seed's sample (class labels, past radar frames), stacked along
        the first dimension and a pure function of the seed, so a teacher cache can store it and
        any process can draw it again; None for an unconditional backbone."""
        return None

    def observations(self, seeds: Sequence[int]) -> Tensor | None:
        """What was really observed after each seed's conditioning, in data space (the space
        `decode` maps samples to; for pixel models the sample space itself): the radar frames
        that followed the past ones. A fitting target besides the teacher, and the truth of skill
        scores; None for a backbone without observations."""
        return None

    @property
    def device(self) -> torch.device:
        """Where its weights (or, for an analytic model, its buffers) live; the CPU if neither."""
        tensor = next(iter([*self.parameters(), *self.buffers()]), None)
        return torch.device("cpu") if tensor is None else tensor.device

    def sampling_batch(self) -> int:
        """Samples per denoiser call where its weights are: `cpu_batch` on a CPU, else 256."""
        return self.cpu_batch if self.device.type == "cpu" else ACCELERATOR_BATCH

    def blocks(self) -> list[nn.Module]:
        """The network's blocks in the order a call runs them, each called with tensors and
        returning them: what a fit with `checkpoint: blocks` recomputes one at a time in
        backward. None here: such a backbone is recomputed a whole call at a time."""
        return []

    def freeze(self) -> "Backbone":
        self.eval()
        self.requires_grad_(False)
        return self


def conditioned(backbone: Backbone, cond: Tensor | None) -> Callable[[Tensor, Tensor], Tensor]:
    """D(·, ·, cond) as the two-argument denoiser every solver calls. A call on k stacked copies
    of the batch (EPD's parallel points: [all samples at point 1, all at point 2, …]) gets the
    conditioning repeated k times in the same order."""
    if cond is None:
        return backbone.denoise
    return lambda x, sigma: backbone.denoise(x, sigma, repeat_rows(cond, len(x)))


def repeat_rows(cond: Tensor, rows: int) -> Tensor:
    """`cond` stacked whole rows // len(cond) times along dim 0 (once when the sizes agree)."""
    if rows == len(cond):
        return cond
    if rows % len(cond):
        raise ValueError(f"a batch of {rows} rows cannot take conditioning of {len(cond)} rows")
    return cond.repeat(rows // len(cond), *[1] * (cond.dim() - 1))


def sigma_as_batch(sigma: Tensor | float, x: Tensor) -> Tensor:
    """σ broadcast to shape (N, 1, 1, ...) against a batch x of shape (N, ...)."""
    sigma = torch.as_tensor(sigma, dtype=x.dtype, device=x.device)
    return sigma.reshape(-1, *([1] * (x.ndim - 1))).expand(x.shape[0], *([1] * (x.ndim - 1)))
