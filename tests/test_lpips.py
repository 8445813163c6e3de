"""LPIPS: AlexNet weights loaded from a file (written here), unavailable without them, the math."""

import warnings
from pathlib import Path

import lpips
import pytest
import torch
import torch.nn.functional as F
import torchvision

from spanlift.errors import CheckpointError, MetricUnavailable
from spanlift.platform.evaluation.metrics.lpips_metric import (
    alexnet_weights,
    load_lpips,
    lpips_state,
)
from spanlift.platform.evaluation.metrics.states import MeanState


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    torch.manual_seed(0)
    state = torchvision.models.alexnet().state_dict()  # stands in for the ImageNet weights
    path = tmp_path_factory.mktemp("alexnet") / "alexnet.pth"
    torch.save(state, path)
    return path, state


def test_alexnet_feature_weights_come_from_the_file(weights) -> None:
    path, state = weights
    model = load_lpips(path)
    loaded = dict(model.net.named_parameters())
    for index, slice_number in ((0, 1), (3, 2), (6, 3), (8, 4), (10, 5)):
        for part in ("weight", "bias"):
            assert torch.equal(
                loaded[f"slice{slice_number}.{index}.{part}"], state[f"features.{index}.{part}"]
            )


def test_lpips_matches_the_package_model_with_the_same_backbone(weights) -> None:
    path, state = weights
    ours = load_lpips(path)
    with warnings.catch_warnings():  # torchvision's note on lpips' deprecated `pretrained=`
        warnings.simplefilter("ignore", UserWarning)
        reference = lpips.LPIPS(net="alex", pnet_rand=True, verbose=False)
    alexnet = torchvision.models.alexnet()
    alexnet.load_state_dict(state)
    for slice_ in reference.net.children():  # the package's own slicing of torchvision's AlexNet
        for name, module in slice_.named_children():
            module.load_state_dict(alexnet.features[int(name)].state_dict())
    reference = reference.eval()
    g = torch.Generator().manual_seed(1)
    a = torch.rand(4, 1, 64, 64, generator=g) * 2 - 1
    b = torch.rand(4, 1, 64, 64, generator=g) * 2 - 1
    expected = reference(a.expand(-1, 3, -1, -1), b.expand(-1, 3, -1, -1)).flatten()
    state_ab = lpips_state(ours, a, b)
    assert state_ab.count == 4
    assert state_ab.mean == pytest.approx(expected.mean().item(), rel=1e-5)
    assert lpips_state(ours, a, a).mean == pytest.approx(0.0, abs=1e-6)
    # 8×8 digits: both sides upsampled bilinearly to 64×64 before the package's network.
    small_a, small_b = a[:, :, ::8, ::8], b[:, :, ::8, ::8]
    up = [
        F.interpolate(x.expand(-1, 3, -1, -1), size=(64, 64), mode="bilinear")
        for x in (small_a, small_b)
    ]
    expected_small = reference(*up).flatten().mean().item()
    assert lpips_state(ours, small_a, small_b).mean == pytest.approx(expected_small, rel=1e-5)


def test_missing_weights_make_lpips_unavailable_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(
        MetricUnavailable, match=r"LPIPS unavailable: AlexNet weights .*absent\.pth not found"
    ):
        alexnet_weights(tmp_path / "absent.pth")


def test_weights_of_another_network_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.pth"
    torch.save({"features.0.weight": torch.zeros(3)}, path)
    with pytest.raises(CheckpointError, match=r"features\.0\.weight has shape"):
        load_lpips(path)
    torch.save({"encoder.weight": torch.zeros(3)}, path)
    with pytest.raises(CheckpointError, match="0 of the 10 AlexNet feature tensors"):
        load_lpips(path)


def test_mean_state_merges_exactly() -> None:
    parts = [MeanState(1.0, 2), MeanState(5.0, 3)]
    assert parts[0].merge(parts[1]).mean == pytest.approx(6.0 / 5)
