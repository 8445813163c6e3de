"""A tiny stand-in for the NVlabs EDM repository, written to a folder, for loading tests.

EDM's released pickles are training snapshots `{"ema": network, ...}` whose classes are marked
persistent: each pickled object carries its module's source and is rebuilt by a function in
`torch_utils.persistence`, so unpickling needs `torch_utils` (and `dnnlib`) importable but not
`training`. This package does the same in a few lines, and its `EDMPrecond` has the interface of
EDM's preconditioned networks: img_resolution, img_channels, label_dim, use_fp16, sigma_min,
sigma_max, sigma_data, and forward(x, sigma, class_labels=None, force_fp32=False).
"""

import pickle
import sys
from pathlib import Path

import torch

PERSISTENCE = '''
import inspect
import sys
import types

_rebuilt = {}


def persistent_class(cls):
    """Instances pickle with their module's source; unpickling rebuilds the class from it."""
    module = sys.modules[cls.__module__]
    source = module.__dict__.get("__source__") or inspect.getsource(module)

    def __reduce__(self):
        return rebuild, (source, cls.__name__, self.__getstate__())

    cls.__reduce__ = __reduce__
    return cls


def rebuild(source, name, state):
    if source not in _rebuilt:
        module = types.ModuleType(f"_persistent_{len(_rebuilt)}")
        module.__source__ = source
        sys.modules[module.__name__] = module
        exec(compile(source, module.__name__, "exec"), module.__dict__)
        _rebuilt[source] = module
    obj = getattr(_rebuilt[source], name).__new__(getattr(_rebuilt[source], name))
    obj.__setstate__(state)
    return obj
'''

NETWORKS = '''
import torch
from torch import nn
from torch_utils import persistence


@persistence.persistent_class
class TinyNet(nn.Module):
    """F(x, c_noise, labels): two convolutions, noise and label embeddings added in between.

    The noise embedding is the U-Nets' own: sines and cosines of c_noise, then a linear layer,
    one row per element of c_noise; one c_noise for the batch is one row, broadcast, and
    rounds differently from a row per sample."""

    def __init__(self, channels, label_dim, width=16):
        super().__init__()
        self.inp = nn.Conv2d(channels, width, 3, padding=1)
        self.noise = nn.Linear(2 * width, width)
        self.label = nn.Linear(label_dim, width) if label_dim else None
        self.out = nn.Conv2d(width, channels, 3, padding=1)

    def forward(self, x, c_noise, labels):
        frequencies = 1e-3 ** (torch.arange(self.noise.out_features) / self.noise.out_features)
        angles = c_noise.reshape(-1, 1) * frequencies
        noise = self.noise(torch.cat([angles.cos(), angles.sin()], dim=1))
        h = self.inp(x) + noise[:, :, None, None]
        if self.label is not None:
            h = h + self.label(labels)[:, :, None, None]
        return self.out(torch.nn.functional.silu(h))


@persistence.persistent_class
class EDMPrecond(nn.Module):
    def __init__(self, img_resolution, img_channels, label_dim=0, use_fp16=False,
                 sigma_min=0, sigma_max=float("inf"), sigma_data=0.5):
        super().__init__()
        self.img_resolution, self.img_channels, self.label_dim = img_resolution, img_channels, label_dim
        self.use_fp16, self.sigma_min, self.sigma_max = use_fp16, sigma_min, sigma_max
        self.sigma_data = sigma_data
        self.model = TinyNet(img_channels, label_dim)

    def forward(self, x, sigma, class_labels=None, force_fp32=False):
        x = x.to(torch.float32)
        sigma = sigma.to(torch.float32).reshape(-1, 1, 1, 1)
        if self.label_dim:
            if class_labels is None:
                class_labels = torch.zeros([1, self.label_dim], device=x.device)
            class_labels = class_labels.to(torch.float32).reshape(-1, self.label_dim)
        sd = self.sigma_data
        c_skip = sd**2 / (sigma**2 + sd**2)
        c_out = sigma * sd / (sigma**2 + sd**2).sqrt()
        c_in = 1 / (sd**2 + sigma**2).sqrt()
        f = self.model(c_in * x, sigma.log().flatten() / 4, class_labels)
        return c_skip * x + c_out * f.to(torch.float32)

    def round_sigma(self, sigma):
        return torch.as_tensor(sigma)
'''

MODULES = ("dnnlib", "torch_utils", "training")


def write_edm_code(root: Path) -> Path:
    """The package folder: dnnlib/, torch_utils/persistence.py, training/networks.py."""
    for package in MODULES:
        (root / package).mkdir(parents=True, exist_ok=True)
        (root / package / "__init__.py").write_text("")
    (root / "torch_utils" / "persistence.py").write_text(PERSISTENCE)
    (root / "training" / "networks.py").write_text(NETWORKS)
    return root


def forget_edm_code(root: Path) -> None:
    """Drop the package from sys.path and sys.modules, as in a process that never imported it."""
    while str(root) in sys.path:
        sys.path.remove(str(root))
    for name in list(sys.modules):
        if name.split(".")[0] in MODULES or name.startswith("_persistent_"):
            del sys.modules[name]


def write_edm_pickle(
    code: Path, path: Path, resolution: int = 8, label_dim: int = 0, seed: int = 0, key: str = "ema"
) -> Path:
    """An EDM-style snapshot pickle {key: EDMPrecond, "augment_pipe": None} (key "ema" as EDM's
    training writes them) of a network with seeded weights."""
    sys.path.insert(0, str(code))
    try:
        from training.networks import EDMPrecond

        torch.manual_seed(seed)
        network = EDMPrecond(resolution, 3, label_dim=label_dim)
        with path.open("wb") as file:
            pickle.dump({key: network, "augment_pipe": None}, file)
    finally:
        forget_edm_code(code)
    return path
