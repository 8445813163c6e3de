"""The `digits` detector: three 3×3 GELU convolutions, the digits feature loss's detector.

Its 64-d penultimate features serve FID (`--detector digits`) and `loss: digits`; FID on the digits
backbone defaults to the independent `digits_eval` detector (digits_eval_detector.py), so that a
fit with the feature loss is not scored by the network it was fitted on. Registered in
torch-fidelity as `spanlift-digits`; the shared protocol, checkpoint and extractor are in
digits_classifier.py.

Split: held out are the last 360 of the seed-0 permutation of the 1 797 digits; trained on the
first 1 437 (`DigitsDetectorSpec`).
"""

from torch import nn

from spanlift.platform.detectors.digits_classifier import (
    DigitsDetectorSpec,
    DigitsFeatureExtractor,
)

FEATURE_DIM = 64


def conv_gelu_body() -> nn.Sequential:
    """16×16 → three 3×3 convolutions (16², 8², 4²) → flattened → linear → 64 features."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1),
        nn.GELU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1),
        nn.GELU(),
        nn.Conv2d(64, 64, 3, stride=2, padding=1),
        nn.GELU(),
        nn.Flatten(),
        nn.Linear(64 * 4 * 4, FEATURE_DIM),
        nn.GELU(),
    )


SPEC = DigitsDetectorSpec(
    name="digits",
    body=conv_gelu_body,
    features=FEATURE_DIM,
    held_out="last",
)


class DigitsExtractor(DigitsFeatureExtractor, spec=SPEC):
    """`spanlift-digits` in torch-fidelity."""
