"""NVlabs EDM networks (Karras et al. 2022) from their released pickles, called as EDM calls them.

EDM's checkpoints (`edm-cifar10-32x32-uncond-vp.pkl`, `edm-imagenet-64x64-cond-adm.pkl`,
`edm-ffhq-64x64-uncond-vp.pkl`, `edm-afhqv2-64x64-uncond-vp.pkl`, from
https://nvlabs-fi-cdn.nvidia.com/edm/pretrained/) are pickled training snapshots; the network is
`pickle.load(f)["ema"]`. Its classes come from the EDM repository (`dnnlib`, `torch_utils`,
`training`), so the user passes `code=<a clone of github.com/NVlabs/edm>`, and since unpickling
runs code from the file, `allow_pickle=true`.

The network is already a denoiser in σ-form, with its own preconditioning inside:

    D(x, σ, y) = net(x, σ, y)          y: one-hot class labels (N, label_dim), or None

σ is one 0-d tensor when the whole batch shares it, as EDM's sampler passes it (see
`network_sigma`), else one σ per sample.

computed in float32, or float16 on a GPU when the network's `use_fp16` is set (`fp16=` overrides
the pickled choice). The σ range is EDM's sampler's: [max(0.002, net.sigma_min),
min(80, net.sigma_max)].

Class labels, as EDM's `generate.py` draws them: for seed s a generator seeded with s mod 2³²
first draws the latent noise (C, H, W), then label = randint(label_dim) — here on the CPU, so a
seed gets the label EDM's sampler gives it on a CPU. `class_label=k` fixes every sample's class
(EDM's `--class`).

EDM's own protocol ends with one more Euler step from σ_min to σ = 0 (its 18-step Heun spends
35 evaluations); the `edm_to_zero` schedule reproduces it, the default schedules end at σ_min.
"""

from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from spanlift.backbones.base import Backbone, sigma_as_batch
from spanlift.backbones.pickles import files_digest, make_importable, require_opt_in, unpickle
from spanlift.backbones.registry import BACKBONES
from spanlift.errors import CheckpointError, SettingsError

RELEASES = "https://nvlabs-fi-cdn.nvidia.com/edm/pretrained/"
CODE_HINT = "pass code=<a clone of github.com/NVlabs/edm> (it holds dnnlib and torch_utils)"
NETWORK_ATTRIBUTES = ("img_resolution", "img_channels", "label_dim", "sigma_min", "sigma_max")


def read_network(path: Path, allow_pickle: object) -> nn.Module:
    """The `ema` network of an EDM training snapshot pickle, on the CPU, frozen."""
    if not path.is_file():
        raise CheckpointError(
            f"EDM network pickle not found: {path}; download one from {RELEASES} "
            f"(e.g. edm-cifar10-32x32-uncond-vp.pkl) and pass weights=<file>"
        )
    require_opt_in(allow_pickle, path, "EDM network pickle")
    snapshot = unpickle(path, "EDM network pickle", CODE_HINT)
    if not isinstance(snapshot, dict) or "ema" not in snapshot:
        raise CheckpointError(
            f"EDM network pickle {path} has no 'ema' network: expected an EDM training snapshot, "
            f"a dict with the key 'ema' (got {type(snapshot).__name__})"
        )
    network = snapshot["ema"]
    missing = [name for name in NETWORK_ATTRIBUTES if name not in dir(network)]
    if not isinstance(network, nn.Module) or missing:
        raise CheckpointError(
            f"EDM network pickle {path}: 'ema' is not an EDM network "
            f"({type(network).__name__} lacks {', '.join(missing) or 'nn.Module'})"
        )
    return network.cpu().eval().requires_grad_(False)


def seed_labels(seeds: list[int], shape: tuple[int, ...], label_dim: int) -> Tensor:
    """EDM's label of each seed: after randn(shape) from Generator(s mod 2³²), randint(label_dim)."""
    labels = []
    for seed in seeds:
        generator = torch.Generator().manual_seed(int(seed) % (1 << 32))
        torch.randn(*shape, generator=generator)
        labels.append(int(torch.randint(label_dim, size=(), generator=generator)))
    return torch.tensor(labels, dtype=torch.long)


def network_sigma(sigma: Tensor | float, x: Tensor) -> Tensor:
    """σ as EDM's sampler hands it to the network: one 0-d σ when the batch shares it, else one
    per sample, shape (N,). The network embeds each σ it is given; one σ for the batch is one
    embedding row, which rounds differently in float32 from N copies of it, so only this call
    reproduces EDM's samples bit for bit."""
    sigma = torch.as_tensor(sigma, dtype=x.dtype, device=x.device)
    if sigma.numel() == 1:
        return sigma.reshape(())
    return sigma_as_batch(sigma, x).flatten()


@BACKBONES.register("edm")
class EDMNetwork(Backbone):
    """NVlabs EDM network pickle (CIFAR-10, ImageNet-64, FFHQ, AFHQv2), called as EDM calls it."""

    needs: ClassVar[str] = (
        f"weights=<EDM network pickle, from {RELEASES}>, allow_pickle=true, "
        "code=<a clone of github.com/NVlabs/edm>"
    )
    fid_detector = "inception"

    def __init__(
        self,
        weights: str | Path | None = None,
        allow_pickle: bool = False,
        code: str | Path | None = None,
        fp16: bool | None = None,
        class_label: int | None = None,
        resolution: int | None = None,
        sigma_min: float = 0.002,
        sigma_max: float = 80.0,
    ) -> None:
        super().__init__()
        if weights is None:
            raise SettingsError(f"the edm backbone needs {self.needs}")
        make_importable(code, "edm")
        path = Path(weights).expanduser()
        self.net = read_network(path, allow_pickle)
        if fp16 is not None:
            if not isinstance(fp16, bool):
                raise SettingsError(f"edm fp16 must be true or false, got {fp16!r}")
            self.net.use_fp16 = fp16
        size = int(self.net.img_resolution)
        self.shape = (int(self.net.img_channels), size, size)
        if resolution is not None and int(resolution) != size:
            raise SettingsError(
                f"edm resolution={resolution}, but the network in {path} generates "
                f"{size}×{size} images"
            )
        self.label_dim = int(self.net.label_dim)
        self.class_label = self._checked_label(class_label)
        self.sigma_min = max(float(sigma_min), float(self.net.sigma_min))
        self.sigma_max = min(float(sigma_max), float(self.net.sigma_max))
        self._identity = (
            f"edm-{files_digest([path])}-fp16={getattr(self.net, 'use_fp16', False)}"
            f"-class={class_label}-sigma={self.sigma_min:g}:{self.sigma_max:g}"
        )

    def _checked_label(self, class_label: int | None) -> int | None:
        if class_label is None:
            return None
        if self.label_dim == 0:
            raise SettingsError(
                f"edm class_label={class_label}, but the network is unconditional (no labels)"
            )
        if not isinstance(class_label, int) or not 0 <= class_label < self.label_dim:
            raise SettingsError(
                f"edm class_label must be an integer in [0, {self.label_dim - 1}], "
                f"got {class_label!r}"
            )
        return class_label

    def conditioning(self, seeds: list[int]) -> Tensor | None:
        """One-hot class labels (N, label_dim), EDM's per seed (see the module docstring)."""
        if self.label_dim == 0:
            return None
        if self.class_label is not None:
            labels = torch.full((len(seeds),), self.class_label, dtype=torch.long)
        else:
            labels = seed_labels(list(seeds), self.shape, self.label_dim)
        return torch.eye(self.label_dim)[labels]

    def denoise(self, x: Tensor, sigma: Tensor, cond: Any = None) -> Tensor:
        """D(x, σ, y) = net(x, σ, y), the network's own preconditioning and precision."""
        if self.label_dim and cond is None:
            raise SettingsError("the edm network is class-conditional: cond (labels) is required")
        labels = None if cond is None else cond.to(device=x.device, dtype=torch.float32)
        return self.net(x, network_sigma(sigma, x), labels).to(x.dtype)

    def blocks(self) -> list[nn.Module]:
        """The encoder's and decoder's blocks of EDM's U-Nets (SongUNet and DhariwalUNet keep
        them in `model.enc` and `model.dec`); none for another network."""
        model = getattr(self.net, "model", None)
        parts = [getattr(model, name, None) for name in ("enc", "dec")]
        if not all(isinstance(part, nn.ModuleDict) for part in parts):
            return []
        return [block for part in parts for block in part.values()]

    def identity(self) -> str:
        return self._identity
