"""`spanlift doctor --memory` for the EDM sweeps, whose pickles need NVlabs' code to load: the
sweep's backbone replaced by spanlift's EDM-preconditioned U-Net at the widths, depth and
attention of EDM's network (random weights, float32), everything else as the sweep file says (its
fit settings, the Inception-feature loss and the FID detector, torch-fidelity's Inception built
offline by the detector registry).

    CIFAR-10 32 px        DDPM++ (benchmarks/backbone_latency.py's cifar10_size)       53.6 M (55.7 M)
    FFHQ, AFHQv2 64 px    DDPM++ with channel multipliers 1-2-2-2, attention at 16×16
    ImageNet 64 px        ADM (spanlift.backbones.unet.imagenet64_size)                264.9 M (295.9 M)

(parameters of the stand-in, EDM's published count in brackets). The sweep file is read from a
copy in a temporary folder where its FID reference statistics are placeholders (mu = 0,
sigma = I: the memory of an evaluation pass does not read them). Each sweep prints the doctor's
lines: every fit's predicted peak per GPU against `--gpu-memory` and the settings that make it
fit, every solver's evaluation pass at the file's `evaluation.batch_size`.

    python benchmarks/stand_in_plan.py sweeps/edm_*.yaml [--gpu-memory 24]

About 2 minutes per sweep file on 2 CPU cores (the ImageNet-64 one 5).
"""

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import yaml
from backbone_latency import cifar10_size, quiet  # benchmarks/ is on sys.path as a script
from fit_memory import BlockedEDM

from spanlift.backbones.edm_precond import EDMPrecond
from spanlift.backbones.loaded import keep_loaded
from spanlift.backbones.unet import UNet, UNetConfig, imagenet64_size
from spanlift.cli.doctor import summary
from spanlift.platform.doctor.memory import memory_outcomes
from spanlift.platform.sweep.config import load_sweep

PUBLISHED = {"cifar10": "55.7 M", "ffhq": "—", "afhqv2": "—", "imagenet": "295.9 M"}


def ffhq64_size() -> UNetConfig:
    """EDM's FFHQ and AFHQv2 64×64 DDPM++ network: 128 channels, multipliers 1-2-2-2, 4 blocks
    per level, attention at 16×16 (one head of 256 channels)."""
    return UNetConfig(
        in_channels=3,
        channels=128,
        channel_mult=(1, 2, 2, 2),
        blocks_per_level=4,
        attention_levels=(2,),
        heads_channels=256,
        groups=32,
    )


def stand_in(weights: str) -> tuple[BlockedEDM, str]:
    """The stand-in for the EDM pickle named `weights`, and its dataset's key."""
    name = Path(weights).name
    key = next(k for k in PUBLISHED if k in name)
    config, pixels = {
        "cifar10": (cifar10_size(), 32),
        "ffhq": (ffhq64_size(), 64),
        "afhqv2": (ffhq64_size(), 64),
        "imagenet": (imagenet64_size(), 64),
    }[key]
    torch.manual_seed(0)
    return BlockedEDM(EDMPrecond(UNet(config)), (3, pixels, pixels)), key


def placed(sweep: Path, root: Path) -> Path:
    """`sweep` copied to `root/sweeps/`, with placeholder FID statistics where its evaluation
    names a file (module docstring)."""
    (root / "sweeps").mkdir(exist_ok=True)
    copy = Path(shutil.copy(sweep, root / "sweeps"))
    reference = yaml.safe_load(sweep.read_text()).get("evaluation", {}).get("reference", "")
    if str(reference).endswith(".npz"):
        statistics = (copy.parent / reference).resolve()
        statistics.parent.mkdir(parents=True, exist_ok=True)
        np.savez(statistics, mu=np.zeros(2048), sigma=np.eye(2048))
    return copy


def plan(sweep: Path, gpu_gib: float) -> int:
    with tempfile.TemporaryDirectory() as folder:
        config = load_sweep(placed(sweep, Path(folder)))
    backbone, key = stand_in(str(config.backbone_options["weights"]))
    params = sum(p.numel() for p in backbone.parameters()) / 1e6
    print(f"\n{sweep}: stand-in {params:.1f} M parameters ({PUBLISHED[key]} published)")
    print(f"memory per GPU of {gpu_gib:g} GiB (15 % kept free), probed on cpu", flush=True)
    keep_loaded(config.backbone, config.backbone_options, backbone)
    outcomes = []
    for outcome in memory_outcomes(config, int(gpu_gib * 2**30), torch.device("cpu")):
        outcomes.append(outcome)
        print(outcome.line(), flush=True)
    return summary(outcomes)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("sweeps", nargs="+", type=Path, help="EDM sweep files")
    p.add_argument("--gpu-memory", type=float, default=24.0, help="GiB of one GPU")
    args = p.parse_args()
    quiet()
    sys.exit(max(plan(sweep, args.gpu_memory) for sweep in args.sweeps))


if __name__ == "__main__":
    main()
