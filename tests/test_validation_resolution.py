"""What a fit's validation seeds resolve: the figure a fit records, the warning when it is coarser
than 5 %, and `spanlift fit`'s default validation seeds, which resolve 5 % on the mixture."""

import math
import warnings

import numpy as np
import pytest
import torch
from scipy import stats

from spanlift.cli import main, one_line_warning
from spanlift.platform.fitting.compare import fit_spec
from spanlift.platform.fitting.fit import NOISE_MULTIPLE, FitSettings, fit
from spanlift.platform.fitting.resolution import ResolutionWarning, resolves, seeds_needed
from spanlift.platform.sampling.score import sample_errors
from spanlift.platform.sampling.teacher import generate_teacher
from spanlift.seeds import VALIDATION_SAMPLES, role_seeds, validation_after
from spanlift.solvers import SolverSpec, build_solver

SETTINGS = FitSettings(iterations=2, batch_size=16, warmup=0)


def dyweight(gmm, nfe=4):
    return build_solver(SolverSpec("dyweight", nfe), gmm.sigma_min, gmm.sigma_max, channels=1)


def independent_resolution(solver, gmm, validation) -> float:
    """k · SE / mean of the groups' MSE, from the score's per-seed errors and SciPy's standard
    error (groups as the rule forms them: consecutive seeds, sizes differing by at most one)."""
    mse = sample_errors(solver, gmm, validation).square().numpy()
    groups = np.array([g.mean() for g in np.array_split(mse, min(32, len(mse)))])
    return NOISE_MULTIPLE * stats.sem(groups) / groups.mean()


@pytest.mark.parametrize("seeds", [30, 64])
def test_the_recorded_resolution_is_the_starting_losses_standard_error(gmm, gmm_teacher, seeds):
    """30 seeds: one a group; 64: two a group."""
    train, _ = gmm_teacher
    validation = generate_teacher(gmm, validation_after(range(512), seeds), progress=False)
    expected = independent_resolution(dyweight(gmm), gmm, validation)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResolutionWarning)
        result = fit(dyweight(gmm), gmm, train, SETTINGS, progress=False, validation=validation)
    assert result.validation_resolves == pytest.approx(expected, rel=1e-5)


def test_the_checkpoint_and_the_run_keep_it(gmm, gmm_teacher, tmp_path):
    train, _ = gmm_teacher
    validation = generate_teacher(gmm, validation_after(range(512), 64), progress=False)
    spec = SolverSpec("dyweight", 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResolutionWarning)
        fitted = fit_spec(spec, gmm, train, SETTINGS, tmp_path, False, validation)
    again = fit_spec(spec, gmm, train, SETTINGS, tmp_path, False, validation)  # from the cache
    expected = independent_resolution(dyweight(gmm), gmm, validation)
    assert fitted.metrics()["fit.validation_resolves"] == pytest.approx(expected, rel=1e-5)
    assert again.metrics()["fit.validation_resolves"] == fitted.validation_resolves


def test_thirty_seeds_warn_and_say_how_many_are_needed(gmm, gmm_teacher):
    train, _ = gmm_teacher
    validation = generate_teacher(gmm, validation_after(range(512), 30), progress=False)
    with pytest.warns(ResolutionWarning, match="chosen on 30 validation seeds") as caught:
        result = fit(dyweight(gmm), gmm, train, SETTINGS, progress=False, validation=validation)
    (warning,) = caught
    needed = seeds_needed(result.validation_resolves, 30)
    assert f"needs about {needed}" in str(warning.message) and needed > VALIDATION_SAMPLES // 8


def test_the_default_validation_seeds_resolve_five_percent_without_a_warning(gmm, gmm_teacher):
    """`spanlift fit`'s default: the 8 192 validation seeds after its 1 024 training seeds,
    DyWeight at NFE 5 (the mixture's hardest NFE of 3–6 for the rule: 3.8 %)."""
    train, _ = gmm_teacher
    seeds = role_seeds(train=1024, validation=VALIDATION_SAMPLES, test=0)["validation"]
    validation = generate_teacher(gmm, seeds, progress=False)
    settings = FitSettings(iterations=1, batch_size=8, warmup=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResolutionWarning)
        result = fit(dyweight(gmm, 5), gmm, train, settings, progress=False, validation=validation)
    assert result.validation_resolves < 0.05


def test_one_group_or_a_perfect_start_resolves_nothing_to_report():
    assert resolves(torch.tensor([0.3]), 1.0) is None
    assert resolves(torch.zeros(4), 1.0) is None
    assert resolves(torch.tensor([1.0, 3.0]), 2.0) == pytest.approx(
        2 * math.sqrt(2) / math.sqrt(2) / 2
    )


def test_validation_seeds_follow_the_training_seeds_and_never_reach_the_test_seeds():
    assert validation_after(range(1024), 256) == role_seeds(1024, 256, 0)["validation"]
    assert validation_after([5000, 5003], 2) == range(5004, 5006)
    with pytest.raises(Exception, match="would reach the test seeds"):
        validation_after([10**9 - 5], 10)


def test_spanlift_fit_defaults_to_them_and_prints_the_resolution_and_one_line_warning(
    capsys, tmp_path
):
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert f"(default: {VALIDATION_SAMPLES})" in shown
    with pytest.warns(ResolutionWarning) as caught:
        code = main(
            [
                "fit", "--solver", "dyweight", "--nfe", "4", "--backbone", "gmm",
                "--train-samples", "64", "--validation-samples", "30", "--test-samples", "8",
                "--iterations", "2", "--cache", str(tmp_path / "c"), "--out", str(tmp_path / "o"),
                "--no-tracking",
            ]
        )  # fmt: skip
    out, _ = capsys.readouterr()
    assert code == 0
    (warning,) = caught
    shown = one_line_warning(warning.message, warning.category, warning.filename, warning.lineno)
    assert shown.startswith("spanlift: warning: the kept state is chosen on 30 validation seeds")
    assert shown.count("\n") == 1 and shown.endswith("\n")
    assert "validation: 30 seeds resolve a gain of" in out
