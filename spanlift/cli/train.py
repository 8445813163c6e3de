"""`spanlift train-digits | train-nowcast | train-digits-detector`: retrain the embedded networks."""

import argparse
from pathlib import Path
from typing import Any

from spanlift.cli.nowcast import NOWCAST_UNET
from spanlift.cli.options import command
from spanlift.cli.paths import OUTPUT, path_option

DIGITS_UNET = "spanlift/backbones/weights/digits_unet.pt"
DETECTOR = "spanlift/platform/detectors/weights/<detector>_detector.pt"
KEPT = "the weights are written only when training ends: the file is unchanged"


def add_commands(sub: Any) -> None:
    summary = "retrain the embedded digits denoiser"
    command(sub, "train-digits", summary, cmd_train_digits, digits_options, kept=KEPT)
    summary = "retrain a digits FID detector"
    command(
        sub,
        "train-digits-detector",
        summary,
        cmd_train_digits_detector,
        detector_options,
        kept=KEPT,
    )
    summary = "retrain the embedded nowcasting denoiser"
    command(sub, "train-nowcast", summary, cmd_train_nowcast, nowcast_options, kept=KEPT)


def digits_options(digits: argparse.ArgumentParser) -> None:
    digits.add_argument("--steps", type=int, default=4000, help="training steps")
    digits.add_argument("--seed", type=int, default=0, help="training seed")
    path_option(digits, "--out", OUTPUT, default=Path(DIGITS_UNET), help="weights file")


def detector_options(detector: argparse.ArgumentParser) -> None:
    from spanlift.platform.detectors.registry import DIGITS_SPECS

    detector.add_argument(
        "--detector",
        choices=sorted(DIGITS_SPECS),
        default="digits",
        help="digits: the feature loss's detector; digits_eval: the evaluation one",
    )
    detector.add_argument("--steps", type=int, default=1500, help="training steps")
    detector.add_argument(
        "--seed", type=int, help="default: the detector's (digits 0, digits_eval 1)"
    )
    path_option(detector, "--out", OUTPUT, help=f"default: its committed weights, {DETECTOR}")


def nowcast_options(nowcast: argparse.ArgumentParser) -> None:
    nowcast.add_argument(  # a missing folder: the backbone says how to make synthetic storms
        "--data", type=Path, default=Path("data/sevir_train"), help="SEVIR folder"
    )
    nowcast.add_argument("--steps", type=int, default=3000, help="training steps")
    nowcast.add_argument("--seed", type=int, default=0, help="training seed")
    path_option(nowcast, "--out", OUTPUT, default=Path(NOWCAST_UNET), help="weights file")


def cmd_train_digits(args: argparse.Namespace) -> None:
    from spanlift.backbones.train_digits import train_digits

    print(f"wrote {train_digits(args.out, steps=args.steps, seed=args.seed)}")


def cmd_train_digits_detector(args: argparse.Namespace) -> None:
    from spanlift.platform.detectors.registry import DIGITS_SPECS
    from spanlift.platform.detectors.train_digits_detector import train_digits_detector

    spec = DIGITS_SPECS[args.detector]
    out = args.out or spec.weights
    path, accuracy = train_digits_detector(spec, out, steps=args.steps, seed=args.seed)
    print(f"wrote {path} (held-out accuracy {accuracy:.4f})")


def cmd_train_nowcast(args: argparse.Namespace) -> None:
    from spanlift.backbones.train_nowcast import train_nowcast

    print(f"wrote {train_nowcast(args.data, args.out, steps=args.steps, seed=args.seed)}")
