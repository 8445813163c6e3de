"""`spanlift doctor`: check the environment a sweep is about to run in, and every code path on
the device (`spanlift.platform.doctor`)."""

import argparse
import sys
from typing import Any

from spanlift.cli.options import add_tracking_uri, command
from spanlift.cli.paths import FOLDER, INPUT, path_option

DEVICES = ("auto", "cuda", "cpu", "none")


def add_commands(sub: Any) -> None:
    summary = "check Ray, MLflow, storage and a sweep file, and run every solver on the device"
    kept = "the checks printed above are those that ran; nothing was changed"
    command(sub, "doctor", summary, cmd_doctor, add_doctor_options, kept=kept)


def add_doctor_options(doctor: argparse.ArgumentParser) -> None:
    path_option(doctor, "sweep", INPUT, nargs="?", help="a sweep file to check")
    doctor.add_argument(
        "--address", help="Ray cluster to check (default: $RAY_ADDRESS, else local)"
    )
    add_tracking_uri(doctor)
    path_option(
        doctor, "--storage", FOLDER, type=str, help="results folder (default: the sweep file's)"
    )
    doctor.add_argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="where to run the solver checks: auto = CUDA when present, else skipped; "
        "cpu runs them on the CPU; none skips them",
    )
    doctor.add_argument("--batch", type=int, default=500, help="batch of the throughput figures")


def chosen_device(choice: str) -> tuple[Any, str]:
    """(device, why none) for `--device`: None with the reason when the checks are skipped."""
    import torch

    if choice == "none":
        return None, "--device none"
    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "none"
        if choice == "none":
            return (
                None,
                "no CUDA device (torch.cuda.is_available() is False); --device cpu runs them here",
            )
    if choice == "cuda" and not torch.cuda.is_available():
        from spanlift.errors import SettingsError

        raise SettingsError("--device cuda: no CUDA device is visible to torch on this machine")
    return torch.device(choice), ""


def cmd_doctor(args: argparse.Namespace) -> int:
    from spanlift.platform.doctor.environment import environment_checks
    from spanlift.platform.doctor.report import Outcome, checked

    device, why = chosen_device(args.device)
    outcomes = []

    def show(outcome: Outcome) -> None:
        outcomes.append(outcome)
        print(outcome.line(), flush=True)

    for name, body in environment_checks(args.sweep, args.address, args.tracking_uri, args.storage):
        show(checked(name, body))
    if device is None:
        show(Outcome("skip", "solvers, fits, DDP and FID on the device", why))
    else:
        from spanlift.platform.doctor.device import run_device_checks

        print(f"on {device}: every solver, fit, a DDP fit and the FID detector", file=sys.stderr)
        for outcome in run_device_checks(device, batch=args.batch):
            show(outcome)
    counts = {s: sum(o.status == s for o in outcomes) for s in ("pass", "FAIL", "skip")}
    print(f"doctor: {counts['pass']} passed, {counts['FAIL']} failed, {counts['skip']} skipped")
    return 1 if counts["FAIL"] else 0
