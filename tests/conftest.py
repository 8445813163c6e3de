"""Shared fixtures: the analytic Gaussian-mixture backbone, small teacher sets, and an experiment
in a real MLflow sqlite store."""

import os
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from spanlift.backbones import load_backbone
from spanlift.platform.sampling.teacher import generate_teacher
from spanlift.solvers import SOLVERS
from spanlift.solvers.peers import PeerSolver

from .missing_packages import skip_is_a_missing_package
from .mlflow_store import Store

if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test`: one torch thread per test process,
    torch.set_num_threads(1)
    # and per process a test starts (`spanlift` commands, benchmarks): two test processes on two
    # cores, each starting commands whose OpenMP threads would otherwise spin against the other's
    os.environ.setdefault("OMP_NUM_THREADS", "1")

NATIVE_SOLVERS = sorted(name for name, cls in SOLVERS if not issubclass(cls, PeerSolver))
"""The solvers whose loop is spanlift's. Peer solvers run another library's loop (diffusers,
k-diffusion): no solver is built around one, their loops read σ on the host (not on `meta`),
some step only on grids that end at σ = 0 or above it, and they have their own tests
(test_diffusers_schedulers.py, test_kdiffusion_samplers.py)."""


@pytest.fixture(scope="session")
def gmm():
    return load_backbone("gmm")


@pytest.fixture(scope="session")
def gmm64():
    return load_backbone("gmm").double()


def stored_mixture(parameters: dict) -> torch.nn.Module:
    """The Gaussian mixture (float64) with the float32 parameters a reference fixture ran with.
    The mixture builds its means in float32 (randn, bicubic interpolation), whose last bits
    differ between CPUs (measured: AVX-512 against the machine a fixture came from, endpoints
    apart by 7e-7), so a fixture compared at 1e-11 stores the parameters it used."""
    mixture = load_backbone("gmm")
    with torch.no_grad():
        for name in ("means", "variances", "log_weights"):
            buffer = getattr(mixture, name)
            buffer.copy_(torch.tensor(parameters[name], dtype=buffer.dtype))
    return mixture.double()


@pytest.fixture(scope="session")
def gmm_teacher(gmm):
    """(train, test) teacher sets on disjoint seeds."""
    train = generate_teacher(gmm, range(512), progress=False)
    test = generate_teacher(gmm, range(10**6, 10**6 + 256), progress=False)
    return train, test


def noise_like(backbone, n: int, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(
        n, *backbone.shape, generator=torch.Generator().manual_seed(seed), dtype=dtype
    )


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One sqlite store for the module (creating its tables takes seconds)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow')}/mlflow.db"


@pytest.fixture
def store(uri: str, request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A fresh experiment of the test's own."""
    client = MlflowClient(uri)
    name = request.node.name
    client.create_experiment(name, artifact_location=(tmp_path / "artifacts").as_uri())
    return Store(client, uri, name)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A skip for a missing package fails in CI (`missing_packages.py`)."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = report.longrepr[2]
        if skip_is_a_missing_package(reason):
            report.outcome = "failed"
            report.longrepr = f"skipped in CI for a missing package (install it): {reason}"
