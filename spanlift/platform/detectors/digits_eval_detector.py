"""The `digits_eval` detector: a small residual network with BatchNorm, independent of `digits`.

The digits feature loss (`loss: digits`) fits solvers in the `digits` detector's features, so an
FID in those same features says little about a fit with it. FID on the digits backbone therefore
defaults to this detector: another architecture (residual blocks with BatchNorm and ReLU, global
average pooling, 96-d features instead of a flattened 4×4 map and 64-d), another training seed
(1) and another split. Registered in torch-fidelity as `spanlift-digits-eval`; the shared
protocol, checkpoint and extractor are in digits_classifier.py, the training in
train_digits_detector.py.

Split: the `digits` detector's seed-0 permutation of the 1 797 digits with the parts swapped:
held out are its first 360 images (all of them in the `digits` detector's training part), trained
on its last 1 437 (among them the 360 the `digits` detector holds out).
"""

from torch import Tensor, nn

from spanlift.platform.detectors.digits_classifier import (
    DigitsDetectorSpec,
    DigitsFeatureExtractor,
)

WIDTHS = (24, 48, 96)  # channels at 16², 8², 4²
FEATURE_DIM = WIDTHS[-1]


def conv_bn(cin: int, cout: int, kernel: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False),
        nn.BatchNorm2d(cout),
    )


class ResidualBlock(nn.Module):
    """relu(x' + conv-bn(relu(conv-bn(x)))), x' = x or, when the shape changes, a 1×1 conv-bn."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.residual = nn.Sequential(
            conv_bn(cin, cout, 3, stride), nn.ReLU(), conv_bn(cout, cout, 3)
        )
        same = cin == cout and stride == 1
        self.shortcut = nn.Identity() if same else conv_bn(cin, cout, 1, stride)

    def forward(self, x: Tensor) -> Tensor:
        return (self.shortcut(x) + self.residual(x)).relu()


def residual_body() -> nn.Sequential:
    """16×16 → 3×3 stem → a residual block at each of 16², 8², 4² (stride 2 down) → global
    average pooling → 96 features."""
    a, b, c = WIDTHS
    return nn.Sequential(
        conv_bn(1, a, 3),
        nn.ReLU(),
        ResidualBlock(a, a),
        ResidualBlock(a, b, stride=2),
        ResidualBlock(b, c, stride=2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
    )


SPEC = DigitsDetectorSpec(
    name="digits_eval",
    body=residual_body,
    features=FEATURE_DIM,
    held_out="first",
    seed=1,
)


class DigitsEvalExtractor(DigitsFeatureExtractor, spec=SPEC):
    """`spanlift-digits-eval` in torch-fidelity."""
