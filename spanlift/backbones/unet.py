"""A U-Net for denoisers: residual blocks with a noise embedding, optional self-attention.

Small settings give the embedded digits model; `imagenet64_size()` gives a network of the size of
EDM's ImageNet-64 ADM U-Net (~296 M parameters), used to measure solver overhead at that scale.
"""

import math
from dataclasses import asdict, dataclass

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class UNetConfig:
    in_channels: int = 1
    out_channels: int | None = None  # None: as many as in_channels
    channels: int = 32
    channel_mult: tuple[int, ...] = (1, 2)
    blocks_per_level: int = 2
    attention_levels: tuple[int, ...] = (1,)
    heads_channels: int = 32
    groups: int = 8

    def to_dict(self) -> dict:
        return asdict(self)


def imagenet64_size() -> UNetConfig:
    """Channel widths, depth and attention placement of EDM's ImageNet-64 (ADM) network."""
    return UNetConfig(
        in_channels=3,
        channels=192,
        channel_mult=(1, 2, 3, 4),
        blocks_per_level=3,
        attention_levels=(1, 2, 3),
        heads_channels=64,
        groups=32,
    )


def noise_embedding(c_noise: Tensor, dim: int) -> Tensor:
    """Sinusoidal embedding of the noise level c_noise (one scalar per sample), computed in
    float32 and returned in c_noise's dtype (the network's, for half-precision weights)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10_000) * torch.arange(half, device=c_noise.device) / half)
    angles = c_noise.reshape(-1, 1).float() * freqs
    return torch.cat([angles.cos(), angles.sin()], dim=1).to(c_noise.dtype)


class ResBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, emb_dim: int, groups: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(min(groups, c_in), c_in)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.emb = nn.Linear(emb_dim, c_out)
        self.norm2 = nn.GroupNorm(min(groups, c_out), c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1)
        self.skip = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x: Tensor, emb: Tensor) -> Tensor:
        h = self.conv1(nn.functional.silu(self.norm1(x)))
        h = h + self.emb(emb)[:, :, None, None]
        h = self.conv2(nn.functional.silu(self.norm2(h)))
        return self.skip(x) + h


class Attention(nn.Module):
    def __init__(self, channels: int, heads_channels: int, groups: int) -> None:
        super().__init__()
        self.heads = max(1, channels // heads_channels)
        self.norm = nn.GroupNorm(min(groups, channels), channels)
        self.qkv = nn.Conv2d(channels, 3 * channels, 1)
        self.out = nn.Conv2d(channels, channels, 1)

    def forward(self, x: Tensor) -> Tensor:
        n, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(n, 3, self.heads, c // self.heads, h * w).unbind(1)
        attended = nn.functional.scaled_dot_product_attention(
            q.transpose(-1, -2), k.transpose(-1, -2), v.transpose(-1, -2)
        )
        return x + self.out(attended.transpose(-1, -2).reshape(n, c, h, w))


class UNet(nn.Module):
    """F(x, c_noise): the raw network inside an EDM-preconditioned denoiser."""

    def __init__(self, config: UNetConfig) -> None:
        super().__init__()
        self.config = config
        c0, emb_dim = config.channels, 4 * config.channels
        self.emb = nn.Sequential(nn.Linear(c0, emb_dim), nn.SiLU(), nn.Linear(emb_dim, emb_dim))
        self.stem = nn.Conv2d(config.in_channels, c0, 3, padding=1)
        widths = [c0 * m for m in config.channel_mult]

        def attn_or_id(level: int, c: int) -> nn.Module:
            if level in config.attention_levels:
                return Attention(c, config.heads_channels, config.groups)
            return nn.Identity()

        self.down, self.up = nn.ModuleList(), nn.ModuleList()
        self.down_attn, self.up_attn = nn.ModuleList(), nn.ModuleList()
        self.downsample, self.upsample = nn.ModuleList(), nn.ModuleList()
        skips, c = [c0], c0
        for level, width in enumerate(widths):
            for _ in range(config.blocks_per_level):
                self.down.append(ResBlock(c, width, emb_dim, config.groups))
                self.down_attn.append(attn_or_id(level, width))
                c = width
                skips.append(c)
            if level < len(widths) - 1:
                self.downsample.append(nn.Conv2d(c, c, 3, stride=2, padding=1))
                skips.append(c)
        self.mid = nn.ModuleList(
            [ResBlock(c, c, emb_dim, config.groups), ResBlock(c, c, emb_dim, config.groups)]
        )
        self.mid_attn = Attention(c, config.heads_channels, config.groups)
        for level, width in reversed(list(enumerate(widths))):
            for _ in range(config.blocks_per_level + 1):
                self.up.append(ResBlock(c + skips.pop(), width, emb_dim, config.groups))
                self.up_attn.append(attn_or_id(level, width))
                c = width
            if level > 0:
                self.upsample.append(nn.Conv2d(c, c, 3, padding=1))
        self.head = nn.Sequential(
            nn.GroupNorm(min(config.groups, c), c),
            nn.SiLU(),
            nn.Conv2d(c, config.out_channels or config.in_channels, 3, padding=1),
        )

    def blocks(self) -> list[nn.Module]:
        """Its residual and attention blocks (what `checkpoint: blocks` recomputes)."""
        return [m for m in self.modules() if isinstance(m, ResBlock | Attention)]

    def forward(self, x: Tensor, c_noise: Tensor) -> Tensor:
        cfg = self.config
        emb = self.emb(noise_embedding(c_noise.expand(len(x)), cfg.channels))
        h = self.stem(x)
        skips, blocks = [h], iter(zip(self.down, self.down_attn, strict=True))
        for level in range(len(cfg.channel_mult)):
            for block, attn in (next(blocks) for _ in range(cfg.blocks_per_level)):
                h = attn(block(h, emb))
                skips.append(h)
            if level < len(cfg.channel_mult) - 1:
                h = self.downsample[level](h)
                skips.append(h)
        h = self.mid_attn(self.mid[0](h, emb))
        h = self.mid[1](h, emb)
        blocks, ups = iter(zip(self.up, self.up_attn, strict=True)), iter(self.upsample)
        for level in reversed(range(len(cfg.channel_mult))):
            for block, attn in (next(blocks) for _ in range(cfg.blocks_per_level + 1)):
                h = attn(block(torch.cat([h, skips.pop()], dim=1), emb))
            if level > 0:
                h = next(ups)(nn.functional.interpolate(h, scale_factor=2.0, mode="nearest"))
        return self.head(h)
