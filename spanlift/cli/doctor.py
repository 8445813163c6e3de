"""`spanlift doctor`: check the environment a sweep is about to run in, and every code path on
the device (`spanlift.platform.doctor`)."""

import argparse
import sys
from typing import Any

from spanlift.cli.devices import missing_device
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
    doctor.add_argument(
        "--memory",
        action="store_true",
        help="instead: the sweep's predicted peak memory per GPU, of every configuration's fit "
        "and evaluation, from a probe of its backbone on this machine, and the memory settings "
        "that make each fit",
    )
    doctor.add_argument(
        "--gpu-memory",
        type=float,
        help="GiB of one GPU of the cluster, for --memory (default: this machine's GPU, else 80)",
    )


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
    if missing_device(choice):
        from spanlift.errors import SettingsError

        raise SettingsError(missing_device(choice))
    return torch.device(choice), ""


def cmd_doctor(args: argparse.Namespace) -> int:
    from spanlift.platform.doctor.environment import environment_checks
    from spanlift.platform.doctor.report import Outcome, checked

    outcomes = []

    def show(outcome: Outcome) -> None:
        outcomes.append(outcome)
        print(outcome.line(), flush=True)

    if args.memory:
        return memory_plan(args, show, outcomes)
    device, why = chosen_device(args.device)
    for name, body in environment_checks(args.sweep, args.address, args.tracking_uri, args.storage):
        show(checked(name, body))
    if device is None:
        show(Outcome("skip", "solvers, fits, DDP and FID on the device", why))
    else:
        from spanlift.platform.doctor.device import run_device_checks

        print(f"on {device}: every solver, fit, a DDP fit and the FID detector", file=sys.stderr)
        for outcome in run_device_checks(device, batch=args.batch):
            show(outcome)
    return summary(outcomes)


def summary(outcomes: list[Any]) -> int:
    """The last line, and the status: 1 when a check failed."""
    counts = {s: sum(o.status == s for o in outcomes) for s in ("pass", "FAIL", "skip")}
    print(f"doctor: {counts['pass']} passed, {counts['FAIL']} failed, {counts['skip']} skipped")
    return 1 if counts["FAIL"] else 0


def memory_plan(args: argparse.Namespace, show: Any, outcomes: list[Any]) -> int:
    """`--memory`: each configuration's fit and evaluation against one GPU's memory."""
    import torch

    from spanlift.errors import SettingsError
    from spanlift.platform.doctor.memory import memory_outcomes
    from spanlift.platform.sampling.tensor_memory import arithmetic_skipped
    from spanlift.platform.sweep.config import load_sweep

    if args.sweep is None:
        raise SettingsError("--memory needs a sweep file: spanlift doctor --memory SWEEP")
    config = load_sweep(args.sweep)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gib = args.gpu_memory
    if gib is None:
        gib = (
            torch.cuda.get_device_properties(0).total_memory / 2**30
            if device.type == "cuda"
            else 80.0
        )
    if gib <= 0:
        raise SettingsError(f"--gpu-memory: expected GiB > 0, got {gib}")
    print(
        f"memory of {args.sweep} per GPU of {gib:g} GiB (15 % kept free), probed on {device}",
        file=sys.stderr,
    )
    with arithmetic_skipped():  # the bytes of every operation, the arithmetic of none
        for outcome in memory_outcomes(config, int(gib * 2**30), device):
            show(outcome)
    return summary(outcomes)
