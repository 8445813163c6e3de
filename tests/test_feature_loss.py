"""Feature losses for fitting (`loss: inception`, `loss: digits`): the differentiable detector
path matches torch-fidelity's own forward, and gradients reach the solver."""

import pytest
import torch

from spanlift.backbones import load_backbone
from spanlift.platform.detectors.registry import load_detector
from spanlift.platform.fitting.fit import FitSettings, fit
from spanlift.platform.fitting.losses import LOSSES
from spanlift.platform.sampling.rollout import rollout
from spanlift.platform.sampling.teacher import generate_teacher
from spanlift.solvers import SolverSpec, build_solver


@pytest.mark.parametrize("name", ["inception", "digits", "digits_eval"])
def test_differentiable_path_equals_the_detectors_uint8_forward(name: str, tmp_path) -> None:
    detector = load_detector(name, tmp_path)
    g = torch.Generator().manual_seed(0)
    pixels = torch.randint(0, 256, (4, 3, 8, 8), generator=g, dtype=torch.uint8)
    with torch.no_grad():
        (expected,) = detector.extractor(pixels)  # torch-fidelity's uint8 forward
        ours = detector.differentiable(detector.extractor, pixels.float())
    assert ours.shape == expected.shape
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("loss_name", ["digits", "inception"])
def test_feature_loss_is_zero_on_the_teacher_and_has_gradients(loss_name: str) -> None:
    backbone = load_backbone("digits")
    loss_fn = LOSSES.get(loss_name)(backbone.decode)
    g = torch.Generator().manual_seed(2)
    teacher = torch.randn(2, 1, 8, 8, generator=g).clamp(-1, 1)
    student = (teacher + 0.3 * torch.randn(2, 1, 8, 8, generator=g)).requires_grad_(True)
    assert loss_fn(teacher, teacher).item() == pytest.approx(0.0, abs=1e-10)
    loss = loss_fn(student, teacher)
    loss.backward()
    assert loss.item() > 0
    assert torch.isfinite(student.grad).all() and student.grad.abs().sum() > 0


def test_fitting_dyweight_with_the_digits_feature_loss_lowers_it() -> None:
    backbone = load_backbone("digits")
    teacher = generate_teacher(backbone, range(64), progress=False)
    spec = SolverSpec("dyweight", 3)
    solver = build_solver(spec, backbone.sigma_min, backbone.sigma_max, backbone.shape[0])
    loss_fn = LOSSES.get("digits")(backbone.decode)

    def full_loss() -> float:
        with torch.no_grad():
            return loss_fn(rollout(solver, backbone, teacher.noise), teacher.endpoints).item()

    before = full_loss()
    settings = FitSettings(iterations=30, batch_size=16, lr=2e-2, seed=0, loss="digits")
    fit(solver, backbone, teacher, settings, progress=False)
    after = full_loss()
    assert after < 0.8 * before, (before, after)


def test_sweep_and_fit_settings_name_the_feature_losses() -> None:
    assert {"mse", "inception", "digits"} <= set(LOSSES.names())
    with pytest.raises(Exception, match="unknown loss 'lpips'"):
        FitSettings(loss="lpips")
