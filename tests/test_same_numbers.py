"""Same inputs, same numbers: every random stream of a fit comes from its seed and configuration,
never from what the process drew before."""

from pathlib import Path

import pytest
import torch
import yaml

from spanlift.platform.fitting.fit import FitSettings, fit
from spanlift.solvers import SolverSpec, build_solver
from tests.cli_run import spanlift
from tests.test_sweep import GMM_SMOKE, runs_of, sweep_file

GMM_TEACHER = yaml.safe_load(GMM_SMOKE.read_text())["teacher"]

SPANLIFT = SolverSpec("spanlift", 4, "edm", {"base": "dyweight", "kernel_size": 3})


def weights(solver: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in solver.parameters()])


def test_initial_weights_depend_on_the_spec_and_seed_alone(gmm):
    first = build_solver(SPANLIFT, gmm.sigma_min, gmm.sigma_max, 1, seed=0)
    torch.rand(1000)  # the process draws in between, as another trial in the same worker would
    state = torch.get_rng_state()
    again = build_solver(SPANLIFT, gmm.sigma_min, gmm.sigma_max, 1, seed=0)
    assert torch.equal(torch.get_rng_state(), state)  # a build leaves the process's stream alone
    other = build_solver(SPANLIFT, gmm.sigma_min, gmm.sigma_max, 1, seed=1)
    assert torch.equal(weights(first), weights(again))
    assert not torch.equal(weights(first), weights(other))


def test_a_fit_is_the_same_whatever_the_process_drew_before(gmm, gmm_teacher):
    train, _ = gmm_teacher
    settings = FitSettings(iterations=8, batch_size=16, seed=3, validation=0.0)

    def fitted() -> torch.Tensor:
        solver = build_solver(SPANLIFT, gmm.sigma_min, gmm.sigma_max, 1, seed=3)
        fit(solver, gmm, train, settings, progress=False)
        return weights(solver)

    once = fitted()
    torch.randn(4096)
    assert torch.equal(once, fitted())


SPANLIFT_ENTRY = {
    "name": "spanlift",
    "nfe": 4,
    "settings": {"base": "dyweight", "kernel_size": 1, "hidden_dim": 16},
}
DYWEIGHT_ENTRY = {"name": "dyweight", "nfe": 4}
FIT = {"iterations": 60, "batch_size": 16, "lr": 0.005, "seed": 0}
TEACHER = {"train_samples": 256, "validation_samples": 128, "test_samples": 128}


def det_sweep(folder, solvers: list[dict]) -> Path:
    """The sweep a user ran twice and got two values from (GMM, SpanLift on DyWeight, NFE 4)."""
    return sweep_file(folder, "det", solvers=solvers, fit=FIT, teacher={**GMM_TEACHER, **TEACHER})


def values(folder: Path) -> dict[str, tuple[float, float, float]]:
    """Each configuration's (rmse, val_rmse, error_p90), by its configuration label."""
    return {
        r.data.params["configuration"]: (
            r.data.metrics["rmse"],
            r.data.metrics["val_rmse"],
            r.data.metrics["error_p90"],
        )
        for r in runs_of(folder, "det")
    }


@pytest.mark.e2e
def test_the_same_sweep_gives_the_same_numbers_whatever_its_order_and_concurrency(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    for folder, solvers, cpus in (
        (first, [SPANLIFT_ENTRY], "2"),
        (second, [DYWEIGHT_ENTRY, SPANLIFT_ENTRY], "1"),  # another entry before it, one at a time
    ):
        folder.mkdir()
        result = spanlift(folder, "sweep", str(det_sweep(folder, solvers)), "--num-cpus", cpus)
        assert result.returncode == 0, result.stdout + result.stderr
    label = "spanlift[base=dyweight,hidden_dim=16,kernel_size=1]"
    assert values(first)[label] == values(second)[label]  # equal, not close

    fitted = spanlift(
        first,
        "fit",
        "--backbone", "gmm", "--solver", "spanlift", "--nfe", "4",
        "--set", "base=dyweight", "--set", "kernel_size=1", "--set", "hidden_dim=16",
        "--iterations", "60", "--batch-size", "16", "--lr", "0.005", "--seed", "0",
        "--train-samples", "256", "--validation-samples", "128", "--test-samples", "128",
        "--threads", "1", "--no-tracking",
    )  # fmt: skip
    assert fitted.returncode == 0, fitted.stdout + fitted.stderr
    checkpoint = first / fitted.stdout.split("checkpoint: ")[1].split()[0]
    assert rmse_on_test_seeds(checkpoint, first / ".spanlift" / "cache") == values(first)[label][0]


def rmse_on_test_seeds(checkpoint: Path, cache: Path) -> float:
    """The checkpoint's RMSE on the test seeds `spanlift fit` cached, on one thread, as a sweep's
    trial scores it."""
    from spanlift.backbones import load_backbone
    from spanlift.platform.sampling.score import endpoint_rmse
    from spanlift.platform.sampling.teacher import load_or_generate
    from spanlift.seeds import role_seeds
    from spanlift.solvers.loading import load_solver

    gmm = load_backbone("gmm")
    test = load_or_generate(cache, gmm, role_seeds(256, 128, 128)["test"], progress=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return endpoint_rmse(load_solver(None, checkpoint, gmm), gmm, test)
    finally:
        torch.set_num_threads(threads)
