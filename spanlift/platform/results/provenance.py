"""What re-running a result needs to know about where it ran: code, library versions, threads,
device, dtype. Every run records these as `env.*` params, and `spanlift rerun` compares them.

    env.commit     the git commit of the code ("" outside a git checkout)
    env.modified   whether the checkout had uncommitted changes
    env.spanlift, env.torch, env.ray     versions
    env.threads    torch's intra-op threads (float rounding may depend on them)
    env.device     the GPU's name, or "cpu"
    env.gpus       GPUs this process sees
    env.dtype      the dtype samples were computed in
    env.deterministic   whether the fit ran PyTorch's deterministic algorithms (`deterministic`)
"""

import subprocess
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

import spanlift


@cache
def git_state() -> tuple[str, bool]:
    """(commit, modified) of the checkout the package runs from; ("", False) outside one."""
    folder = Path(spanlift.__file__).parent

    def git(*args: str) -> str:
        try:
            done = subprocess.run(
                ["git", *args], cwd=folder, capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "HEAD")
    return commit, bool(commit and git("status", "--porcelain", "--", "."))


def package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return ""


def device_name(device: torch.device) -> str:
    """The GPU's name, or "cpu"."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def run_environment(
    device: torch.device, dtype: torch.dtype = torch.float32, deterministic: bool = False
) -> dict[str, str]:
    """The `env.*` params of a run computed on `device` in this process (module docstring)."""
    commit, modified = git_state()
    return {
        "env.commit": commit,
        "env.modified": str(modified).lower(),
        "env.spanlift": package_version("spanlift"),
        "env.torch": torch.__version__,
        "env.ray": package_version("ray"),
        "env.threads": str(torch.get_num_threads()),
        "env.device": device_name(device),
        "env.gpus": str(torch.cuda.device_count()),
        "env.dtype": str(dtype).removeprefix("torch."),
        "env.deterministic": str(deterministic).lower(),
    }
