"""FlowTurbo's velocity refiner: a one-block diffusion transformer (SiT/DiT block with adaLN-Zero)
that reads the state and a velocity and answers a velocity correction,

    R(x_t, u, t) = unpatchify(Final(Block_k(… Block_1(E(concat(x_t, u)) + P, c) …, c), c)),
    c = MLP(sin/cos(t)) + e,

the architecture of FlowTurbo's refiner (Zhao et al., NeurIPS 2024, `VelocityRefinerBlock`):

    E     p×p patches of the 2C input channels, linearly embedded to `hidden_dim` (a stride-p conv)
    P     fixed 2-D sin-cos position table (half the width from the column, half from the row)
    sin/cos(t)  256 frequencies f_k = 10000^(−k/128): (cos(t f_k), sin(t f_k)), in float32
    Block h ← h + g₁ Attn(LN(h)(1 + a₁) + b₁);  h ← h + g₂ MLP(LN(h)(1 + a₂) + b₂),
          (b₁, a₁, g₁, b₂, a₂, g₂) = W SiLU(c);  LN without affine, ε = 10⁻⁶; MLP with tanh-GELU
    Final W_o(LN(h)(1 + a) + b), (b, a) = W' SiLU(c)

e is a learned vector: the authors' class embedding, here one row since spanlift's solvers see no
labels (their refiner with every label the null class is this one). Their refiner predicts twice
the channels and keeps the first half (`learn_sigma`); this one predicts only those. Initialised
as their training starts (`VelocityPredictor.initialize_weights`): Xavier-uniform linear and patch
weights with zero biases, N(0, 0.02²) for e and the time MLP's weights, and every modulation and
the output layer zero, so R ≡ 0 until it is trained.
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from spanlift.errors import SettingsError
from spanlift.solvers.operators import check_positive

FREQUENCIES = 256
"""Width of the sinusoidal time features (the authors' `frequency_embedding_size`)."""
MAX_PERIOD = 10000


def time_features(t: Tensor) -> Tensor:
    """(cos(t f_k), sin(t f_k)) for f_k = exp(−ln(10000) k / 128), k < 128, computed in float32."""
    half = FREQUENCIES // 2
    freqs = torch.exp(
        -math.log(MAX_PERIOD) * torch.arange(half, dtype=torch.float32, device=t.device) / half
    )
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def sincos_1d(width: int, positions: Tensor) -> Tensor:
    """(sin(p ω_k), cos(p ω_k)), ω_k = 10000^(−k/(width/2)), k < width/2, in float64."""
    omega = 1.0 / MAX_PERIOD ** (torch.arange(width // 2, dtype=torch.float64) / (width / 2))
    angles = positions.reshape(-1, 1).double() * omega
    return torch.cat([angles.sin(), angles.cos()], dim=1)


def position_table(width: int, rows: int, cols: int) -> Tensor:
    """(rows·cols, width): the column's 1-D table, then the row's, for tokens in row-major order."""
    row, col = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    return torch.cat([sincos_1d(width // 2, col), sincos_1d(width // 2, row)], dim=1).float()


def modulate(h: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    return h * (1 + scale[:, None]) + shift[:, None]


def layer_norm(h: Tensor) -> Tensor:
    return F.layer_norm(h, h.shape[-1:], eps=1e-6)


class Attention(nn.Module):
    """Multi-head self-attention: one qkv projection, scaled dot product, an output projection."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, h: Tensor) -> Tensor:
        n, tokens, width = h.shape
        qkv = self.qkv(h).reshape(n, tokens, 3, self.heads, width // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        mixed = F.scaled_dot_product_attention(q, k, v)
        return self.out(mixed.transpose(1, 2).reshape(n, tokens, width))


class RefinerBlock(nn.Module):
    """h ← h + g₁ Attn(modulated LN(h)); h ← h + g₂ MLP(modulated LN(h)), modulation from c."""

    def __init__(self, hidden: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        self.attention = Attention(hidden, heads)
        inner = int(hidden * mlp_ratio)
        self.mlp = nn.Sequential(
            nn.Linear(hidden, inner), nn.GELU(approximate="tanh"), nn.Linear(inner, hidden)
        )
        self.modulation = nn.Linear(hidden, 6 * hidden)

    def forward(self, h: Tensor, c: Tensor) -> Tensor:
        shift1, scale1, gate1, shift2, scale2, gate2 = self.modulation(F.silu(c)).chunk(6, dim=1)
        h = h + gate1[:, None] * self.attention(modulate(layer_norm(h), shift1, scale1))
        return h + gate2[:, None] * self.mlp(modulate(layer_norm(h), shift2, scale2))


class VelocityRefiner(nn.Module):
    """R(x_t, u, t): the velocity correction (module docstring); zero until trained."""

    def __init__(
        self,
        channels: int,
        hidden_dim: int = 64,
        heads: int = 4,
        blocks: int = 1,
        patch_size: int = 2,
        mlp_ratio: float = 4.0,
    ) -> None:
        super().__init__()
        hidden = check_positive("hidden_dim", hidden_dim)
        check_positive("heads", heads)
        check_positive("blocks", blocks)
        self.patch = check_positive("patch_size", patch_size)
        if hidden % 4 or hidden % heads:
            raise SettingsError(
                f"flowturbo hidden_dim must be a multiple of 4 (the position table) and of heads "
                f"({heads}), got {hidden}"
            )
        if isinstance(mlp_ratio, bool) or not isinstance(mlp_ratio, int | float) or mlp_ratio <= 0:
            raise SettingsError(f"flowturbo mlp_ratio must be a number > 0, got {mlp_ratio!r}")
        self.channels = channels
        self.embed = nn.Conv2d(2 * channels, hidden, patch_size, stride=patch_size)
        self.time = nn.Sequential(
            nn.Linear(FREQUENCIES, hidden), nn.SiLU(), nn.Linear(hidden, hidden)
        )
        self.label = nn.Parameter(torch.zeros(hidden))
        self.blocks = nn.ModuleList(RefinerBlock(hidden, heads, mlp_ratio) for _ in range(blocks))
        self.final_modulation = nn.Linear(hidden, 2 * hidden)
        self.final = nn.Linear(hidden, patch_size**2 * channels)
        self.initialise()

    def initialise(self) -> None:
        """As the authors' training starts: Xavier-uniform, N(0, 0.02²), modulations and output 0."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)
        nn.init.xavier_uniform_(self.embed.weight.view(len(self.embed.weight), -1))
        nn.init.zeros_(self.embed.bias)
        nn.init.normal_(self.label, std=0.02)
        nn.init.normal_(self.time[0].weight, std=0.02)
        nn.init.normal_(self.time[2].weight, std=0.02)
        for layer in [*(b.modulation for b in self.blocks), self.final_modulation, self.final]:
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)

    def forward(self, x_t: Tensor, u: Tensor, t: Tensor) -> Tensor:
        """R(x_t, u, t) for a batch (N, C, H, W) at the time t (a scalar tensor). Runs in its
        weights' dtype and answers in x_t's."""
        n, _, height, width = x_t.shape
        p = self.patch
        if height % p or width % p:
            raise SettingsError(
                f"flowturbo patch_size {p} must divide the sample's height and width, got "
                f"{height}×{width}"
            )
        dtype = self.embed.weight.dtype
        h = self.embed(torch.cat([x_t, u], dim=1).to(dtype)).flatten(2).transpose(1, 2)
        h = h + self.positions(height // p, width // p, h)
        times = torch.ones(n, device=x_t.device) * t.to(x_t.device, torch.float32)
        c = self.time(time_features(times).to(dtype)) + self.label
        for block in self.blocks:
            h = block(h, c)
        shift, scale = self.final_modulation(F.silu(c)).chunk(2, dim=1)
        out = self.final(modulate(layer_norm(h), shift, scale))
        rows, cols = height // p, width // p
        out = out.reshape(n, rows, cols, p, p, self.channels).permute(0, 5, 1, 3, 2, 4)
        return out.reshape(n, self.channels, height, width).to(x_t.dtype)

    def positions(self, rows: int, cols: int, like: Tensor) -> Tensor:
        """The position table for a rows × cols patch grid on `like`'s device and dtype, made
        once per grid, device and dtype (not state: a function of the shape alone)."""
        key = (rows, cols, like.device, like.dtype)
        cache = self.__dict__.setdefault("_positions", {})
        if key not in cache:
            cache[key] = position_table(like.shape[-1], rows, cols).to(like.device, like.dtype)
        return cache[key]
