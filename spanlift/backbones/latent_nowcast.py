"""A PreDiff-form latent nowcasting model (Gao et al., NeurIPS 2023) seen in EDM σ-form.

A per-frame 2-D autoencoder maps SEVIR VIL frames to latents (c channels at 1/f of the frame's
size) and a VP ε-prediction denoiser forecasts the 6 future latent frames, conditioned on the
latents of the 7 past frames. Both are read from local files; nothing is downloaded.

PreDiff's released checkpoints (the documented way): `code=<clone of PreDiff's repository>
cfg=<its cfg.yaml> vae=<.pt> unet=<.pt> [alignment=<.pt>] trust_code=true`; the classes are built
from the config with PreDiff's own code and the state dicts loaded into them (prediff_release.py);
with `alignment` the denoiser carries PreDiff's knowledge-alignment guidance
(knowledge_alignment.py; `guide_scale`, default the config's `model.align.guide_scale`).

Modules built elsewhere may instead be given as `denoiser=` and `autoencoder=` files: TorchScript
(torch.jit.save; loading runs no Python) or whole pickled modules (torch.save(module); loading runs
code from the file, so it needs allow_pickle=true, and code=<folder> when its classes live in a
package not installed here). They must offer (layout NTHWC: batch, frame, height, width, channel):

    denoiser      eps = denoiser(z_t, t, cond)
                    z_t   (N, 6, h, w, c)  noisy latents of the 6 future frames
                    t     (N,)             timesteps, float (fractional between table entries)
                    cond  (N, 7, h, w, c)  latents of the 7 past frames
                    eps   like z_t         the predicted noise ε
    autoencoder   autoencoder.encode(frames)  (B, 1, H, W) in [0, 1] → (B, c, h, w) latents
                    of the conditioning, as the denoiser was trained on them (PreDiff: the
                    posterior mode, not multiplied by its scale factor); deterministic (not a
                    sample), so a seed's conditioning is always the same
                  autoencoder.decode(latents) (B, c, h, w) → (B, 1, H, W) in [0, 1] for the
                    latents the denoiser generates (PreDiff: divided by its scale factor first)

Frames reach the autoencoder as VIL/255 = (x + 1)/2 for frames x ∈ [−1, 1], as PreDiff's SEVIR
pipeline scales them.

Schedule (latent diffusion's "linear"): β_t = (linspace(√β_start, √β_end, T))², ᾱ_t = Π_{s≤t}(1 − β_s),
σ_t = sqrt((1 − ᾱ_t)/ᾱ_t) for t = 0 … T−1, so σ_min = σ_0 and σ_max = σ_{T−1}.

σ-form. A sample x has shape (6c, h, w): the 6 latent frames' channels stacked, channel index =
frame·c + channel. With x = z/√ᾱ and √ᾱ = 1/sqrt(1 + σ²),

    D(x, σ) = x − σ · ε(x / sqrt(1 + σ²), t(σ), cond).

t(σ) interpolates log σ over the table: between neighbouring integer timesteps k and k+1,
t = k + (log σ − log σ_k)/(log σ_{k+1} − log σ_k), clamped to [0, T−1]. A fractional t goes to
the denoiser as it is (a float); t within 1e-4 of an integer is rounded to it, so σ_k read off
the table in float32 (at most ~1.5e-5 timesteps off) reaches the model as exactly k.

With knowledge alignment ε is the guided ε̃ = ε + k_t · s · ∇U of knowledge_alignment.py, and the
conditioning carries each window's knowledge target as an eighth frame: cond (N, 8, h, w, c),
frames 0–6 the past latents, frame 7 filled with avg_x (the denoiser sees frames 0–6 only).
"""

import warnings
import zipfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from spanlift.backbones.base import Backbone, sigma_as_batch
from spanlift.backbones.knowledge_alignment import KnowledgeAlignment
from spanlift.backbones.nowcast import open_windows
from spanlift.backbones.nowcast_windows import (
    INPUTS,
    OUTPUTS,
    NowcastWindows,
    frames_side_by_side,
)
from spanlift.backbones.pickles import files_digest, make_importable, require_opt_in
from spanlift.backbones.prediff_release import load_release
from spanlift.backbones.registry import BACKBONES
from spanlift.backbones.weights import weights_digest
from spanlift.errors import CheckpointError, SettingsError
from spanlift.nowcasting.windows import SplitSettings

TIMESTEP_SNAP = 1e-4
"""t(σ) within this many timesteps of an integer is rounded to it."""

CONVERSION_HINT = (
    "PreDiff's released state dicts load directly with code=<PreDiff clone> cfg=<cfg.yaml> "
    "vae=<.pt> unet=<.pt> trust_code=true; other modules as torch.jit.save or torch.save files"
)


def vp_sigmas(timesteps: int, linear_start: float, linear_end: float) -> Tensor:
    """σ_t = sqrt((1 − ᾱ_t)/ᾱ_t), t = 0 … T−1, of the "linear" schedule
    β_t = (linspace(√β_start, √β_end, T))², ᾱ_t = Π_{s≤t}(1 − β_s); float64."""
    if timesteps < 2 or not 0 < linear_start < linear_end < 1:
        raise SettingsError(
            f"prediff schedule needs timesteps >= 2 and 0 < linear_start < linear_end < 1, got "
            f"timesteps={timesteps}, linear_start={linear_start}, linear_end={linear_end}"
        )
    roots = torch.linspace(linear_start**0.5, linear_end**0.5, timesteps, dtype=torch.float64)
    alphas_cumprod = torch.cumprod(1 - roots**2, dim=0)
    return ((1 - alphas_cumprod) / alphas_cumprod).sqrt()


def timestep_of_sigma(sigma: Tensor, log_sigmas: Tensor) -> Tensor:
    """t(σ): linear in log σ between the neighbouring table entries, clamped to [0, T−1], and
    rounded to an integer within TIMESTEP_SNAP of one (float64, shape of σ)."""
    log_sigmas = log_sigmas.to(device=sigma.device, dtype=torch.float64)
    log_sigma = sigma.double().log().clamp(log_sigmas[0], log_sigmas[-1])
    upper = torch.searchsorted(log_sigmas, log_sigma).clamp(1, len(log_sigmas) - 1)
    lower = upper - 1
    fraction = (log_sigma - log_sigmas[lower]) / (log_sigmas[upper] - log_sigmas[lower])
    t = lower + fraction
    nearest = t.round()
    return torch.where((t - nearest).abs() < TIMESTEP_SNAP, nearest, t)


def is_torchscript(path: Path) -> bool:
    """Whether `path` is a TorchScript archive: a zip holding constants.pkl (torch.save's lack it)."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return any(PurePosixPath(name).name == "constants.pkl" for name in archive.namelist())


def load_module(path: Path, role: str, allow_pickle: bool) -> nn.Module:
    """The `role` module ("denoiser", "autoencoder") of a TorchScript file or, with allow_pickle,
    of a pickled module; on the CPU."""
    if not path.is_file():
        raise CheckpointError(f"prediff {role} not found: {path}; {CONVERSION_HINT}")
    if is_torchscript(path):
        return load_torchscript(path, role)
    require_opt_in(allow_pickle, path, f"prediff {role}")
    return load_pickled_module(path, role)


def load_torchscript(path: Path, role: str) -> nn.Module:
    """torch.jit.load on the CPU; an unreadable archive is a CheckpointError."""
    with warnings.catch_warnings():  # torch 2.14 deprecates TorchScript; it still loads
        warnings.filterwarnings("ignore", category=FutureWarning, message=".*torch.jit.load")
        try:
            return torch.jit.load(str(path), map_location="cpu")
        except RuntimeError as exc:
            raise CheckpointError(f"cannot read prediff {role} TorchScript {path}: {exc}") from None


def load_pickled_module(path: Path, role: str) -> nn.Module:
    """torch.load of a whole pickled module (runs code from the file); its classes must import."""
    try:
        module = torch.load(path, map_location="cpu", weights_only=False)
    except (ImportError, AttributeError) as exc:
        raise CheckpointError(
            f"prediff {role} {path} needs classes that cannot be imported ({exc}): pass "
            f"code=<folder with the model's package>"
        ) from None
    except Exception as exc:
        raise CheckpointError(f"cannot read prediff {role} {path}: {exc}") from None
    if not isinstance(module, nn.Module):
        raise CheckpointError(
            f"prediff {role} {path} holds a {type(module).__name__}, not a module; "
            f"{CONVERSION_HINT}"
        )
    return module


def placement(module: nn.Module) -> tuple[torch.device, torch.dtype]:
    """Device and dtype of the module's first parameter (the CPU and float32 when it has none)."""
    first = next(module.parameters(), None)
    if first is None:
        return torch.device("cpu"), torch.float32
    return first.device, first.dtype


@BACKBONES.register("prediff")
class LatentNowcast(Backbone):
    """PreDiff's released latent nowcasting model, or PreDiff-form modules, from local files
    (with cfg=, the schedule is the config's: timesteps, linear_start, linear_end are not used)."""

    needs: ClassVar[str] = (
        "PreDiff's release: code=<PreDiff clone>, cfg=<cfg.yaml>, vae=<.pt>, unet=<.pt>, "
        "[alignment=<.pt>, guide_scale], trust_code=true; or denoiser=, autoencoder= "
        "(TorchScript or pickles with allow_pickle=true); and data=<SEVIR folder or store>"
    )

    def __init__(
        self,
        denoiser: str | Path | None = None,
        autoencoder: str | Path | None = None,
        data: str | Path | None = None,
        grid: int = 128,
        code: str | Path | None = None,
        allow_pickle: bool = False,
        timesteps: int = 1000,
        linear_start: float = 1e-4,
        linear_end: float = 2e-2,
        cfg: str | Path | None = None,
        vae: str | Path | None = None,
        unet: str | Path | None = None,
        alignment: str | Path | None = None,
        trust_code: bool = False,
        guide_scale: float | None = None,
        knowledge_multiplier: float = 2.0,
        split: str = "earthformer",
        start: str | None = None,
        end: str | None = None,
    ) -> None:
        super().__init__()
        grid = int(grid)
        if data is None or not (cfg or (denoiser and autoencoder)):
            raise SettingsError(
                "the prediff backbone needs data=<SEVIR folder or prepared store> and either "
                "PreDiff's release (code=<clone> cfg=<cfg.yaml> vae=<.pt> unet=<.pt> "
                "trust_code=true) or denoiser=<file>, autoencoder=<file>"
            )
        if cfg is not None:
            if code is None or vae is None or unet is None:
                raise SettingsError(
                    "prediff cfg= loads PreDiff's release: pass code=<PreDiff clone>, vae=<.pt> "
                    "and unet=<.pt> too"
                )
            release = load_release(code, cfg, vae, unet, alignment, trust_code, guide_scale)
            denoiser_module, autoencoder_module = release.unet, release.autoencoder
            schedule = release.schedule
            timesteps, linear_start, linear_end = (
                schedule.timesteps,
                schedule.linear_start,
                schedule.linear_end,
            )
            guidance = (
                KnowledgeAlignment(
                    release.alignment, release.guide_scale, timesteps, linear_start, linear_end
                )
                if release.alignment is not None and release.guide_scale != 0
                else None
            )
            files = [Path(f) for f in (cfg, vae, unet, alignment) if f is not None]
        else:
            if not isinstance(allow_pickle, bool):
                raise SettingsError(
                    f"prediff allow_pickle must be true or false, got {allow_pickle!r}"
                )
            make_importable(code, "prediff")
            files = [Path(denoiser), Path(autoencoder)]
            denoiser_module, autoencoder_module = (
                load_module(path, role, allow_pickle)
                for path, role in zip(files, ("denoiser", "autoencoder"), strict=True)
            )
            guidance = None
        bounds = (None if date is None else str(date) for date in (start, end))  # YAML: dates
        windows = open_windows(data, grid, SplitSettings(split, *bounds))
        if windows.train.shape[-2:] != (grid, grid):
            raise SettingsError(
                f"prediff data {data} gives frames of {tuple(windows.train.shape[-2:])}, "
                f"not grid={grid}; pass the grid the model was trained on"
            )
        sigmas = vp_sigmas(timesteps, linear_start, linear_end)
        digest = files_digest(files)
        if guidance is not None:
            digest += f"-align{guidance.guide_scale:g}x{float(knowledge_multiplier):g}"
        self.knowledge_multiplier = float(knowledge_multiplier)
        self._assemble(denoiser_module, autoencoder_module, windows, sigmas, digest, guidance)

    @classmethod
    def from_modules(
        cls,
        denoiser: nn.Module,
        autoencoder: nn.Module,
        windows: NowcastWindows,
        timesteps: int = 1000,
        linear_start: float = 1e-4,
        linear_end: float = 2e-2,
    ) -> "LatentNowcast":
        """The backbone of already-built modules and windows (tests, code that holds the model);
        its identity hashes the modules' state instead of files."""
        backbone = cls.__new__(cls)  # skips __init__, which reads files
        Backbone.__init__(backbone)
        sigmas = vp_sigmas(timesteps, linear_start, linear_end)
        digest = "-".join(
            weights_digest({name: t.cpu() for name, t in module.state_dict().items()})
            for module in (denoiser, autoencoder)
        )
        backbone.knowledge_multiplier = 2.0
        backbone._assemble(denoiser, autoencoder, windows, sigmas, digest)
        return backbone

    def _assemble(
        self,
        denoiser: nn.Module,
        autoencoder: nn.Module,
        windows: NowcastWindows,
        sigmas: Tensor,
        digest: str,
        guidance: KnowledgeAlignment | None = None,
    ) -> None:
        """Hold the parts, the σ table and the identity; freeze; read the latent shape off them."""
        self.denoiser, self.autoencoder, self.windows = denoiser, autoencoder, windows
        self.guidance = guidance
        self.register_buffer("log_sigmas", sigmas.log(), persistent=False)
        self.sigma_min, self.sigma_max = float(sigmas[0]), float(sigmas[-1])
        schedule = f"{len(sigmas)}:{sigmas[0].item():.17g}:{sigmas[-1].item():.17g}"
        self._identity = f"prediff-{digest}-{windows.identity}-{schedule}"
        self.freeze()
        self.shape = self._latent_shape()

    @torch.no_grad()
    def _latent_shape(self) -> tuple[int, int, int]:
        """(6c, h, w) from one blank frame through the autoencoder; checks that the autoencoder
        gives frames of the windows' size back and that the denoiser's ε has z_t's shape."""
        height, width = self.windows.train.shape[-2:]
        device, dtype = placement(self.autoencoder)
        latents = self.autoencoder.encode(
            torch.zeros(1, 1, height, width, device=device, dtype=dtype)
        )
        frames = self.autoencoder.decode(latents)
        if latents.ndim != 4 or frames.shape != (1, 1, height, width):
            raise SettingsError(
                f"prediff autoencoder maps a frame (1, 1, {height}, {width}) to latents "
                f"{tuple(latents.shape)} and back to {tuple(frames.shape)}: its downsampling does "
                f"not fit grid={height}; pass the grid it was trained on"
            )
        channels, h, w = latents.shape[1:]
        noisy = latents.new_zeros(1, OUTPUTS, h, w, channels)
        cond = latents.new_zeros(1, INPUTS, h, w, channels)
        try:
            eps = self.denoiser(noisy, latents.new_zeros(1), cond)
        except RuntimeError as exc:
            raise SettingsError(
                f"prediff denoiser fails on latents z_t {tuple(noisy.shape)}, cond "
                f"{tuple(cond.shape)} of grid={height} frames: {exc}"
            ) from None
        if eps.shape != noisy.shape:
            raise SettingsError(
                f"prediff denoiser returns ε of shape {tuple(eps.shape)} for z_t of shape "
                f"{tuple(noisy.shape)}; it must return one like z_t (grid={height})"
            )
        return (OUTPUTS * channels, h, w)

    @property
    def latent_channels(self) -> int:
        """c: the autoencoder's latent channels per frame."""
        return self.shape[0] // OUTPUTS

    def timestep(self, sigma: Tensor) -> Tensor:
        """t(σ), see the module docstring."""
        return timestep_of_sigma(sigma, self.log_sigmas)

    def denoise(self, x: Tensor, sigma: Tensor, cond: Any = None) -> Tensor:
        """D(x, σ) = x − σ · ε(x / sqrt(1 + σ²), t(σ), cond), cond from `conditioning`."""
        if cond is None:
            raise SettingsError("the prediff backbone forecasts from past frames: cond is required")
        sigma = sigma_as_batch(sigma, x)
        t = self.timestep(sigma.reshape(-1)).to(x.dtype)
        noisy = self.to_frames(x / (1 + sigma**2).sqrt())
        if self.guidance is None:
            return x - sigma * self.from_frames(self.denoiser(noisy, t, cond))
        past, target = cond[:, :INPUTS], cond[:, INPUTS, 0, 0, 0]
        eps = self.denoiser(noisy, t, past) + self.guidance(noisy, t, past, target)
        return x - sigma * self.from_frames(eps)

    def to_frames(self, x: Tensor) -> Tensor:
        """(N, 6c, h, w) → (N, 6, h, w, c): channel frame·c + k becomes frame `frame`, channel k."""
        n, _, h, w = x.shape
        return x.reshape(n, OUTPUTS, self.latent_channels, h, w).permute(0, 1, 3, 4, 2)

    def from_frames(self, frames: Tensor) -> Tensor:
        """(N, 6, h, w, c) → (N, 6c, h, w), the inverse of `to_frames`."""
        n, _, h, w, c = frames.shape
        return frames.permute(0, 1, 4, 2, 3).reshape(n, OUTPUTS * c, h, w)

    @torch.no_grad()
    def conditioning(self, seeds: Sequence[int]) -> Tensor:
        """Latents of each seed's 7 past frames (N, 7, h, w, c), on the autoencoder's device;
        with knowledge alignment an eighth frame holding the window's target avg_x."""
        device, dtype = placement(self.autoencoder)
        past = self.windows.past(seeds).to(device=device, dtype=dtype)  # (N, 7, H, W)
        n, frames, height, width = past.shape
        latents = self.autoencoder.encode(((past + 1) / 2).reshape(n * frames, 1, height, width))
        cond = latents.reshape(n, frames, *latents.shape[1:]).permute(0, 1, 3, 4, 2)
        if self.guidance is None:
            return cond
        return torch.cat([cond, self.knowledge_frame(seeds, cond[:, :1])], dim=1)

    def knowledge_frame(self, seeds: Sequence[int], like: Tensor) -> Tensor:
        """avg_x = multiplier × mean of the observed future frames on [0, 1], as a latent frame."""
        future = (self.windows.future(seeds).to(like.device, torch.float64) + 1) / 2
        target = self.knowledge_multiplier * future.flatten(1).mean(dim=1)
        return target.to(like.dtype).reshape(-1, 1, 1, 1, 1).expand_as(like).clone()

    def observations(self, seeds: Sequence[int]) -> Tensor:
        """The 6 observed future frames (N, 6, H, W) in [−1, 1] (CPU, as the windows hold them)."""
        return self.windows.future(seeds)

    def decode(self, x: Tensor) -> Tensor:
        """Latents (N, 6c, h, w) → frames (N, 6, H, W) in [−1, 1]: each frame's latents through
        autoencoder.decode, then x = 2·d − 1. Differentiable (feature losses train through it)."""
        n, _, h, w = x.shape
        latents = x.reshape(n * OUTPUTS, self.latent_channels, h, w)  # frame-major channels
        decoded = self.autoencoder.decode(latents)  # (N·6, 1, H, W)
        return (decoded * 2 - 1).reshape(n, OUTPUTS, *decoded.shape[-2:])

    def to_images(self, x: Tensor) -> Tensor:
        """The 6 forecast frames side by side as one grey uint8 image (N, H, 6W, 1)."""
        return frames_side_by_side(super().to_images(x))

    def identity(self) -> str:
        return self._identity
