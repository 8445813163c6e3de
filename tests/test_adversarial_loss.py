"""GAS's adversarial fit loss (`loss: adversarial`): its discriminator trains on each batch with
gradients, validation sees the distillation term alone, the student gets the adversarial gradient,
and a fit with it runs and lowers the distance to the teacher."""

import pytest
import torch

from spanlift.errors import SettingsError
from spanlift.platform.fitting.fit import FitSettings, fit
from spanlift.platform.fitting.losses import LOSSES, mean_squared_error
from spanlift.solvers import SolverSpec, build_solver


def images(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(6, 1, 8, 8, generator=g).clamp(-1, 1)
    return teacher + 0.3 * torch.randn(6, 1, 8, 8, generator=g), teacher


def critic_state(loss) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in loss.critic.parameters()])


def test_without_gradients_it_is_the_distillation_term():
    loss = LOSSES.get("adversarial")(lambda x: x)
    student, teacher = images(0)
    with torch.no_grad():
        value = loss(student, teacher)
    assert torch.equal(value, mean_squared_error(student, teacher))
    assert loss.critic is None, "validation trains no discriminator"


def test_with_gradients_the_critic_trains_and_the_student_gets_its_term():
    torch.manual_seed(0)
    loss = LOSSES.get("adversarial")(lambda x: x, weight=0.5, lr=1e-2)
    student, teacher = images(1)
    student.requires_grad_(True)
    value = loss(student, teacher)
    assert value > mean_squared_error(student, teacher)  # softplus > 0
    first = critic_state(loss)
    value.backward()
    mse_only = 2 * (student - teacher).detach() / student.numel()
    assert not torch.allclose(student.grad, mse_only), "the adversarial term reaches the student"
    assert all(p.grad is None or not p.requires_grad for p in loss.critic.parameters())
    loss(student.detach(), teacher)
    assert not torch.equal(critic_state(loss), first), "each call with gradients is a critic step"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"distill": "adversarial"}, "another loss"),
        ({"distill": "latent"}, "needs the option 'dinov2_path'"),
        ({"weight": -1.0}, "weight must be a number ≥ 0"),
        ({"lr": 0.0}, "lr must be a number > 0"),
        ({"gamma": float("nan")}, "gamma"),
        ({"width": 0}, "width must be a positive integer"),
    ],
)
def test_bad_options_are_refused(options, message):
    with pytest.raises(SettingsError, match=message):
        LOSSES.get("adversarial")(lambda x: x, **options)


def test_a_gs_fit_with_it_lowers_the_distance_to_the_teacher(gmm, gmm_teacher):
    train, test = gmm_teacher
    gs = build_solver(SolverSpec("gs", 4), gmm.sigma_min, gmm.sigma_max, 1)
    x = gmm.prior(test.noise[:64])

    def distance() -> float:
        with torch.no_grad():
            return mean_squared_error(gs(gmm.denoise, x), test.endpoints[:64]).item()

    before = distance()
    settings = FitSettings(
        iterations=15,
        batch_size=16,
        lr=2e-2,
        warmup=3,
        loss="adversarial",
        loss_options={"width": 8},
        validation=0.0,
    )
    fit(gs, gmm, train, settings, progress=False)
    assert distance() < 0.5 * before
