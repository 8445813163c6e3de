"""`spanlift doctor`: what it checks, what it says when a check fails, and what it skips."""

import pytest
import torch

from spanlift.backbones import load_backbone
from spanlift.errors import SettingsError
from spanlift.platform.doctor import device as doctor_device
from spanlift.platform.doctor.environment import storage_check, sweep_check
from spanlift.platform.doctor.report import Skipped, checked
from spanlift.solvers import SOLVERS
from spanlift.solvers.peers import PeerSolver
from tests.cli_run import ROOT, spanlift
from tests.conftest import NATIVE_SOLVERS


def usable(cls: type[PeerSolver]) -> bool:
    """Whether the peer solver's library is installed here."""
    try:
        cls.module()
    except SettingsError:
        return False
    return True


def test_a_check_passes_skips_or_fails_with_its_reason():
    assert checked("a", lambda: "fine").line() == "pass  a  fine"
    assert checked("b", lambda: (_ for _ in ()).throw(Skipped("no GPU"))).status == "skip"
    failed = checked("c", lambda: 1 / 0)
    assert failed.status == "FAIL"
    assert "ZeroDivisionError" in failed.detail


def test_a_failed_check_prints_a_user_error_as_its_plain_message():
    outcome = checked("a", lambda: (_ for _ in ()).throw(SettingsError("x: y; choose z")))
    assert outcome.line() == "FAIL  a  x: y; choose z"


def test_a_missing_fid_reference_is_a_fail_line_with_no_class_path():
    sweep = ROOT / "sweeps" / "edm_cifar10.yaml"
    if (ROOT / "models" / "fid-refs" / "cifar10-32x32.npz").exists():
        pytest.skip("the reference is present in this checkout")
    outcome = checked("sweep file", lambda: sweep_check(sweep))
    assert outcome.status == "FAIL"
    assert outcome.detail.startswith(f"{sweep}: evaluation.reference: FID reference ")
    assert "spanlift." not in outcome.detail and "Error" not in outcome.detail


def test_every_registered_solver_is_checked_and_wrappers_over_every_base_that_takes_them():
    specs = doctor_device.solver_specs()
    installed = {name for name, cls in SOLVERS if not issubclass(cls, PeerSolver) or usable(cls)}
    assert {spec.name for spec in specs} == installed  # a peer library may be absent
    assert {"diffusers:HeunDiscreteScheduler", "diffusers:DEISMultistepScheduler"} <= installed
    bases = {spec.settings["base"] for spec in specs if spec.name == "ld3"}
    assert bases == set(NATIVE_SOLVERS) - {"ld3", "oss", "ds_solver"}  # their grids are their own
    spanlift_bases = {spec.settings["base"] for spec in specs if spec.name == "spanlift"}
    assert "unipc" in spanlift_bases
    assert "amed_plugin" not in spanlift_bases  # refused when built: no Δ to add to


@pytest.mark.parametrize("name", ["spanlift", "epd", "ld3"])
def test_a_fit_check_fits_on_the_device_and_keeps_the_parameters_there(name):
    digits = load_backbone("digits").freeze()
    teacher = doctor_device.generate_teacher(
        digits, range(24), doctor_device.TEACHER, progress=False
    )
    spec = doctor_device.first_buildable(name, {})
    outcome = checked(name, doctor_device.fit_check(spec, digits, teacher, torch.device("cpu")))
    assert outcome.status == "pass", outcome.detail
    assert outcome.detail.startswith("loss ")


def test_a_rollout_check_fails_when_the_endpoint_leaves_the_dtype():
    half = load_backbone("digits").freeze().to(torch.bfloat16)
    spec = doctor_device.first_buildable("euler", {})
    body = doctor_device.rollout_check(spec, half, torch.device("cpu"), torch.float32)
    assert checked("euler", body).status == "FAIL"  # float32 noise into a bfloat16 network


def test_a_uri_the_product_cannot_write_is_a_failed_check_not_a_folder(tmp_path):
    assert "is writable" in storage_check(str(tmp_path / "runs"), None)
    outcome = checked("storage", lambda: storage_check("ftp://host/runs", None))
    assert outcome.status == "FAIL"
    assert "ftp:// cannot be written" in outcome.detail


@pytest.mark.e2e
def test_doctor_checks_the_environment_and_says_what_it_skipped(tmp_path):
    result = spanlift(
        tmp_path,
        "doctor",
        str(ROOT / "sweeps" / "gmm_smoke.yaml"),
        "--storage",
        str(tmp_path / "runs"),
        "--tracking-uri",
        f"sqlite:///{tmp_path}/mlflow.db",
        "--device",
        "none",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for name in ("sweep file", "storage", "MLflow store", "Ray"):
        assert any(line.startswith(f"pass  {name}") for line in lines), result.stdout
    assert any(line.startswith("skip  solvers") for line in lines)
    assert lines[-1] == "doctor: 4 passed, 0 failed, 1 skipped"
    assert not (tmp_path / "mlflow.db").exists()  # a check creates no store


def test_a_gpu_asked_for_where_none_exists_is_one_line_and_exit_2(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = spanlift(tmp_path, "doctor", "--device", "cuda")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "spanlift: error: --device cuda: no CUDA device is visible to torch on this machine"
    )
