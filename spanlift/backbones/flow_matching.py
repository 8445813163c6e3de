"""Latent flow-matching text-to-image models from local diffusers folders, in EDM σ-form.

diffusers' flow models (SANA, FLUX) mix the clean latent x0 with standard normal noise at
s ∈ [0, 1] (s = 1: pure noise) and predict the velocity:

    x_s = (1 − s)·x0 + s·noise,        v(x_s, s) ≈ noise − x0,        so x0 = x_s − s·v.

(diffusers 0.42.1: DPMSolverMultistepScheduler with flow_prediction, convert_model_output:
x0_pred = sample − sigma_t·model_output with sigma_t = s; FlowMatchEulerDiscreteScheduler.step:
prev_sample = sample + (s' − s)·model_output; its scale_noise: s·noise + (1 − s)·sample.)

σ-form. Divided by the signal coefficient, x̃ = x_s/(1 − s) = x0 + σ·noise with σ = s/(1 − s):

    s = σ/(1 + σ),        x_s = x̃/(1 + σ),        D(x̃, σ) = x0 = x_s − s·v(x_s, s).

The derivative (x̃ − D)/σ = x_s + (1 − s)·v is the noise estimate, and an Euler step in σ is the
scheduler's Euler step x_s + (s' − s)·v: both forms walk the same path.

σ range. The schedulers step s on multiples of 1/T (num_train_timesteps T = 1000:
FlowMatchEulerDiscreteScheduler's s = k/T, k = 1 … T), and s = 1 is σ = ∞, so the default range
is s ∈ [1/T, 1 − 1/T]: σ_min = 1/(T − 1) ≈ 0.001, σ_max = T − 1 = 999, where the prior
σ_max·noise misses only x0/σ_max of x̃ (0.1 %). sigma_min= and sigma_max= override them.

Samples are latents (C, h, w) as the transformer sees them: the VAE's latent z scaled as the
pipeline scales it, x0 = scaling·(z − shift), so `decode` is vae.decode(x0/scaling + shift),
clamped to [−1, 1] as the pipeline's postprocessing clamps (and differentiable, for losses).

Prompts. `conditioning(seeds)` gives each seed's MJHQ-30K prompt index (prompts.py);
`denoise` turns indices into text embeddings with the pipeline's own `encode_prompt`, with the
keywords `pipeline(prompt)` uses by default, each prompt encoded once and then kept on the CPU.

NFE. One call of D is one evaluation, also when classifier-free guidance doubles the batch inside
it (the paper's convention); its latency includes both halves, since they are one call.

Loading reads the folder `pipeline.save_pretrained` writes (or `hf download
<repository> --local-dir <folder>`), with local_files_only: nothing is downloaded. The identity
hashes model_index.json and every file of the folder's components (a full SHA-256 read of the
weights: tens of seconds for FLUX), the prompts file and the options.
"""

import hashlib
import inspect
import json
from abc import abstractmethod
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from spanlift.backbones.base import Backbone, PipelineForm, sigma_as_batch
from spanlift.backbones.prompts import PromptSplit, read_mjhq
from spanlift.errors import CheckpointError, SettingsError
from spanlift.files import file_sha256

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
"""The weights' dtypes a flow backbone runs in, by option value."""

ENCODE_BATCH = 16
"""Prompts encoded per text-encoder call."""

Embeddings = tuple[Tensor, ...]
"""A pipeline's encoding of N prompts: tensors whose first dimension is N."""


def flow_time(sigma: Tensor) -> Tensor:
    """s = σ/(1 + σ): the flow time (the pipelines' `sigma`) of the EDM noise level σ."""
    return sigma / (1 + sigma)


def flow_latent(x: Tensor, sigma: Tensor) -> Tensor:
    """x_s = x̃/(1 + σ): the pipeline's latent of the σ-form state x̃ at σ (the model's input)."""
    return x / (1 + sigma)


def flow_denoised(x_s: Tensor, s: Tensor, velocity: Tensor) -> Tensor:
    """D = x0 = x_s − s·v: the denoised latent of the velocity v predicted at (x_s, s)."""
    return x_s - s * velocity


def flow_timestep(s: Tensor, train_timesteps: int) -> Tensor:
    """t = s·T: the timestep the pipelines' flow schedulers hand out (T = num_train_timesteps);
    SANA's pipeline multiplies it by the transformer's timestep_scale, FLUX's divides it by 1000."""
    return s * train_timesteps


def import_diffusers(backbone: str) -> ModuleType:
    """The diffusers package (and transformers, for the text encoders), or a SettingsError."""
    try:
        import diffusers
        import transformers  # noqa: F401
    except ImportError as exc:
        raise SettingsError(
            f"the {backbone} backbone needs diffusers and transformers ({exc}); "
            f"install them with pip install 'spanlift[diffusers]'"
        ) from None
    return diffusers


def call_defaults(pipeline: Any, names: Sequence[str]) -> dict[str, Any]:
    """The defaults of the pipeline's __call__ keywords `names`: how `pipeline(prompt)` runs."""
    parameters = inspect.signature(type(pipeline).__call__).parameters
    return {name: parameters[name].default for name in names}


def folder_digest(folder: Path, components: Sequence[str]) -> str:
    """16 hex digits of SHA-256 over model_index.json and every file of the component folders:
    relative names and contents, sorted; hidden files (the .cache `hf download` leaves) left out."""
    files = [folder / "model_index.json"]
    for component in components:
        files += sorted(
            path
            for path in (folder / component).rglob("*")
            if path.is_file()
            and not any(part.startswith(".") for part in path.relative_to(folder).parts)
        )
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(folder).as_posix().encode())
        digest.update(bytes.fromhex(file_sha256(path)))
    return digest.hexdigest()[:16]


def folder_needs(pipeline_name: str, repository: str) -> str:
    """What a flow backbone needs, as `spanlift backbones` prints it."""
    return (
        f"path=<a {pipeline_name} folder, e.g. from `hf download {repository} "
        f"--local-dir <folder>`> and prompts=<MJHQ-30K meta_data.json>"
    )


def positive_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SettingsError(f"{what} must be a positive integer, got {value!r}")
    return value


def number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SettingsError(f"{what} must be a number, got {value!r}")
    return float(value)


class FlowMatchingBackbone(Backbone):
    """A diffusers flow-matching text-to-image pipeline as a σ-form denoiser over latents.

    Subclasses name the pipeline and its parts and give the transformer call (`velocity`), the
    prompt encoding (`encode`) and the latent geometry.
    """

    pipeline_name: ClassVar[str]  # the diffusers pipeline class
    repository: ClassVar[str]  # a Hugging Face repository holding such a folder
    components: ClassVar[tuple[str, ...]]  # the folder's sub-folders the pipeline loads
    text_encoders: ClassVar[tuple[str, ...]]  # the components that encode prompts

    def __init__(
        self,
        path: str | Path | None,
        prompts: str | Path | None,
        resolution: int,
        guidance: float,
        dtype: str,
        sigma_min: float | None,
        sigma_max: float | None,
    ) -> None:
        super().__init__()
        if path is None or prompts is None:
            raise SettingsError(f"the {self.name} backbone needs {self.needs}")
        if dtype not in DTYPES:
            raise SettingsError(
                f"{self.name} dtype must be one of {', '.join(DTYPES)}, got {dtype!r}"
            )
        self.resolution = positive_int(resolution, f"{self.name} resolution")
        self.guidance = number(guidance, f"{self.name} guidance")
        self.split: PromptSplit = read_mjhq(prompts)
        folder = Path(path).expanduser()
        self.check_folder(folder)
        self.pipeline = self.load_pipeline(folder, DTYPES[dtype])
        self.transformer, self.vae = self.pipeline.transformer, self.pipeline.vae
        self.encoders = nn.ModuleList(self.pipeline.components[name] for name in self.text_encoders)
        self.train_timesteps = int(self.pipeline.scheduler.config.num_train_timesteps)
        self.shape = self.latent_shape()
        self.sigma_min, self.sigma_max = self.sigma_range(sigma_min, sigma_max)
        self._encoded: dict[int, Embeddings] = {}
        self._identity = (
            f"{self.name}-{folder_digest(folder, self.components)}-prompts={self.split.digest[:16]}"
            f"-resolution={self.resolution}-guidance={self.guidance:g}-dtype={dtype}"
            f"-sigma={self.sigma_min:.17g}:{self.sigma_max:.17g}"
        )
        self.freeze()

    def download_hint(self) -> str:
        return (
            f"pass path=<a {self.pipeline_name} folder>, as `pipeline.save_pretrained(<folder>)` "
            f"writes it or `hf download {self.repository} --local-dir <folder>` "
            f"fetches it"
        )

    def check_folder(self, folder: Path) -> None:
        """A clear CheckpointError when `folder` is not a saved pipeline of the right class."""
        if not folder.is_dir():
            raise CheckpointError(
                f"{self.name} pipeline folder not found: {folder}; {self.download_hint()}"
            )
        index = folder / "model_index.json"
        try:
            declared = json.loads(index.read_text())["_class_name"]
        except (OSError, ValueError, KeyError, TypeError):
            raise CheckpointError(
                f"{self.name} pipeline folder {folder} has no readable model_index.json "
                f"naming its pipeline class; {self.download_hint()}"
            ) from None
        if declared != self.pipeline_name:
            raise CheckpointError(
                f"{self.name} pipeline folder {folder} holds a {declared}, not a "
                f"{self.pipeline_name}; {self.download_hint()}"
            )
        for component in self.components:
            if not (folder / component).is_dir():
                raise CheckpointError(
                    f"{self.name} pipeline folder {folder} lacks its {component}/ folder; "
                    f"{self.download_hint()}"
                )

    def load_pipeline(self, folder: Path, dtype: torch.dtype) -> Any:
        """The pipeline of `folder` on the CPU in `dtype`, from local files only."""
        diffusers = import_diffusers(self.name)
        pipeline_class = getattr(diffusers, self.pipeline_name)
        try:
            return pipeline_class.from_pretrained(folder, local_files_only=True, dtype=dtype)
        except Exception as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CheckpointError(
                f"cannot load the {self.pipeline_name} in {folder}: {reason}; "
                f"{self.download_hint()}"
            ) from None

    def latent_shape(self) -> tuple[int, int, int]:
        """(C, h, w) of a sample at the chosen resolution; the resolution must fit the model."""
        step = self.resolution_step()
        if self.resolution % step:
            raise SettingsError(
                f"{self.name} resolution must be a multiple of {step} (the VAE's downsampling "
                f"times the transformer's patch), got {self.resolution}"
            )
        side = self.resolution // self.pipeline.vae_scale_factor
        return (self.latent_channels(), side, side)

    def sigma_range(self, sigma_min: float | None, sigma_max: float | None) -> tuple[float, float]:
        """[1/(T − 1), T − 1] (see the module docstring), or the options' values."""
        steps = self.train_timesteps - 1
        low = 1 / steps if sigma_min is None else number(sigma_min, f"{self.name} sigma_min")
        high = float(steps) if sigma_max is None else number(sigma_max, f"{self.name} sigma_max")
        if not 0 < low < high < float("inf"):
            raise SettingsError(
                f"{self.name} needs 0 < sigma_min < sigma_max < inf, got sigma_min={low!r}, "
                f"sigma_max={high!r}"
            )
        return low, high

    @abstractmethod
    def latent_channels(self) -> int:
        """C: channels of a sample."""

    @abstractmethod
    def resolution_step(self) -> int:
        """What the image resolution must be a multiple of."""

    @abstractmethod
    def latent_shift(self) -> float:
        """The VAE latent's shift: x0 = scaling·(z − shift)."""

    @abstractmethod
    def encode(self, texts: list[str]) -> Embeddings:
        """The pipeline's encoding of the prompts `texts`, on the text encoders' device."""

    @abstractmethod
    def velocity(self, x_s: Tensor, s: Tensor, embeddings: Embeddings) -> Tensor:
        """v(x_s, s) of a batch (N, C, h, w) at s (N,), guided, in float32."""

    def denoise(self, x: Tensor, sigma: Tensor, cond: Any = None) -> Tensor:
        """D(x̃, σ) = x_s − s·v(x_s, s) with s = σ/(1 + σ), x_s = x̃/(1 + σ); cond: prompt
        indices from `conditioning`."""
        embeddings = self.embeddings(self.prompt_indices(cond))
        sigma = sigma_as_batch(sigma, x)
        s, x_s = flow_time(sigma), flow_latent(x, sigma)
        return flow_denoised(x_s, s, self.velocity(x_s, s.reshape(-1), embeddings).to(x.dtype))

    def pipeline_form(self) -> PipelineForm:
        """Flow velocity over latents x_s, timesteps s·T (`flow_timestep`)."""
        return PipelineForm("flow", tuple(self.shape), self.train_timesteps)

    def prompt_indices(self, cond: Tensor | None) -> list[int]:
        """The prompt indices in `cond` (any dtype: the teacher cache keeps them as floats)."""
        if cond is None:
            raise SettingsError(
                f"the {self.name} backbone is text-conditioned: cond (prompt indices from "
                f"conditioning(seeds)) is required"
            )
        values = cond.reshape(-1).tolist()
        indices = [int(value) for value in values]
        count = len(self.split.texts)
        if indices != values or not all(0 <= index < count for index in indices):
            raise SettingsError(
                f"{self.name} cond must hold prompt indices, integers in [0, {count - 1}]; "
                f"got {cond.reshape(-1)[:8].tolist()}"
            )
        return indices

    def embeddings(self, indices: list[int]) -> Embeddings:
        """The encodings of prompts `indices`, stacked on the transformer's device. Each prompt is
        encoded once, in batches of ENCODE_BATCH, and then kept on the CPU; in the text encoders'
        own precision, also when the first call that needs it runs under a fit's autocast (what
        is kept serves every later call: teacher, fit and evaluation)."""
        missing = sorted(set(indices) - self._encoded.keys())
        for start in range(0, len(missing), ENCODE_BATCH):
            batch = missing[start : start + ENCODE_BATCH]
            with torch.no_grad(), torch.autocast(self.encoder_device().type, enabled=False):
                encoded = self.encode([self.split.texts[index] for index in batch])
            for row, index in enumerate(batch):
                self._encoded[index] = tuple(t[row : row + 1].cpu() for t in encoded)
        rows = [self._encoded[index] for index in indices]
        device = self.transformer.device
        return tuple(torch.cat(parts).to(device) for parts in zip(*rows, strict=True))

    def encoder_device(self) -> torch.device:
        """Where the text encoders run."""
        return self.encoders[0].device

    def conditioning(self, seeds: Sequence[int]) -> Tensor:
        """Each seed's prompt index (N,), int64 (prompts.py: training seeds → training prompts)."""
        return self.split.indices(seeds)

    def prompts(self, seeds: Sequence[int]) -> list[str]:
        """Each seed's prompt text."""
        return [self.split.texts[index] for index in self.split.indices(seeds).tolist()]

    def decode(self, x: Tensor) -> Tensor:
        """Images (N, 3, H, W) in [−1, 1]: vae.decode(x/scaling + shift), clamped; differentiable."""
        latents = x / self.vae.config.scaling_factor + self.latent_shift()
        images = self.vae.decode(latents.to(self.vae.dtype), return_dict=False)[0]
        return images.clamp(-1, 1).to(x.dtype)

    def blocks(self) -> list[nn.Module]:
        """The transformer's blocks (SANA's; FLUX's double- and single-stream ones)."""
        names = ("transformer_blocks", "single_transformer_blocks")
        return [block for name in names for block in getattr(self.transformer, name, [])]

    def identity(self) -> str:
        return self._identity
