"""`arithmetic_skipped()`: a tensor peak counted without the costly operations' arithmetic is the
peak counted with it, forward and backward, for convolutions, matrix products and attention."""

import pytest
import torch
import torch.nn.functional as F

from spanlift.backbones import load_backbone
from spanlift.platform.sampling.tensor_memory import (
    TensorPeak,
    arithmetic_skipped,
    saved_for_backward,
)


class AttentionBlock(torch.nn.Module):
    """A convolution, a projection and scaled-dot-product attention: the costly kinds of op."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.qkv = torch.nn.Linear(16, 48)
        self.out = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x).flatten(2).transpose(1, 2)  # (batch, pixels, 16)
        q, k, v = self.qkv(h).view(*h.shape[:2], 3, 2, 8).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(h.shape)
        return torch.bmm(self.out(a), a.transpose(1, 2)).mean()


def measured(run, skip: bool) -> tuple[int, int]:
    """(peak bytes, bytes saved for backward) of `run()`, its arithmetic skipped or done."""
    with saved_for_backward() as kept:
        if skip:
            with arithmetic_skipped(), TensorPeak() as peak:
                run()
        else:
            with TensorPeak() as peak:
                run()
    return peak.peak, kept["bytes"]


@pytest.mark.parametrize("model", ["attention block", "digits backbone"])
def test_a_peak_counted_without_arithmetic_equals_the_computed_one(model):
    torch.manual_seed(0)
    if model == "digits backbone":
        digits = load_backbone("digits")
        x, sigma = torch.randn(4, *digits.shape), torch.full((4,), 2.0)

        def loss():
            return digits.denoise(x, sigma).square().mean()

    else:
        block = AttentionBlock()
        x = torch.randn(4, 3, 8, 8)

        def loss():
            return block(x)

    x.requires_grad_(True)

    def run():
        loss().backward()

    computed, gradient = measured(run, skip=False), x.grad
    x.grad = None
    skipped = measured(run, skip=True)
    assert not torch.equal(x.grad, gradient)  # the arithmetic really was skipped
    assert skipped == computed
    assert computed[0] > 0 and computed[1] > 0


def test_outside_the_block_the_arithmetic_is_done():
    torch.manual_seed(0)
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    with TensorPeak():
        product = a @ b
    torch.testing.assert_close(product, (a[:, :, None] * b[None]).sum(1))
