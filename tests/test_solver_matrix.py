"""Every solver built over a base, over every base that takes it (the doctor's matrix), fits on
the Gaussian mixture; a combination that cannot fit is refused, in one line, when it is built."""

import pytest
import torch

from spanlift.backbones import load_backbone
from spanlift.errors import SettingsError
from spanlift.platform.doctor import device as doctor
from spanlift.platform.doctor.report import checked
from spanlift.solvers import SolverSpec
from spanlift.solvers.loading import build, is_learnable

GMM = load_backbone("gmm").freeze()


def learned_specs() -> list[SolverSpec]:
    """The doctor's specs that have parameters to fit."""
    return [spec for spec in doctor.solver_specs() if is_learnable(build(spec, GMM))]


@pytest.fixture(scope="module")
def teacher():
    return doctor.generate_teacher(GMM, range(16), doctor.TEACHER, progress=False)


@pytest.mark.parametrize("spec", learned_specs(), ids=lambda s: f"{s.label()}-nfe{s.nfe}")
def test_the_doctors_fit_check_passes(spec, teacher):
    outcome = checked(spec.label(), doctor.fit_check(spec, GMM, teacher, torch.device("cpu")))
    assert outcome.status == "pass", outcome.detail


@pytest.mark.parametrize("base", ["heun", "amed", "epd", "epd_plugin"])
def test_pas_refuses_a_grid_too_short_to_correct_a_step(base):
    """PAS corrects step i only once the trajectory gives it K − 1 rows; with K = 4 and without
    x_T that is step 2, so on two steps (a base that spends two evaluations a step, at NFE 3) it
    would have nothing to fit; with x_T it corrects step 1."""
    nfe = 3 if base == "heun" else 4  # two steps
    without_start = SolverSpec("pas", nfe, settings={"base": base, "start": False})
    with pytest.raises(SettingsError, match="corrects no step") as refused:
        build(without_start, GMM)
    assert len(str(refused.value).splitlines()) == 1
    assert "components" in str(refused.value)
    assert sorted(build(SolverSpec("pas", nfe, settings={"base": base}), GMM).rows) == [1]


@pytest.mark.parametrize(
    "spec",
    [
        SolverSpec("dpm_solver_v3", 3, "logsnr"),
        SolverSpec("spanlift", 3, "logsnr", {"base": "dpm_solver_v3"}),
    ],
    ids=SolverSpec.label,
)
def test_the_doctors_rollout_check_runs_a_solver_whose_statistics_come_from_a_fit(spec):
    """DPM-Solver-v3 has no statistics until a fit estimates them (the fit check does); the
    rollout check, which fits nothing, runs it on degenerate ones instead of failing."""
    check = doctor.rollout_check(spec, GMM, torch.device("cpu"), torch.float32)
    outcome = checked(spec.label(), check)
    assert outcome.status == "pass", outcome.detail
