"""FLUX.1 (Black Forest Labs) from a local FluxPipeline folder, in EDM σ-form.

The σ-form, prompts, NFE and identity: flow_matching.py. The folder, e.g.
`black-forest-labs/FLUX.1-dev` (gated: accept its license on Hugging Face and log in before
downloading), holds transformer/ (FluxTransformer2DModel), vae/ (AutoencoderKL), text_encoder/
and tokenizer/ (CLIP), text_encoder_2/ and tokenizer_2/ (T5) and scheduler/.

The transformer is called as FluxPipeline.__call__ (diffusers 0.42.1) calls it:

    v = unpack(transformer(hidden_states=pack(x_s), timestep=s·T/1000, guidance=g,
                           pooled_projections=p, encoder_hidden_states=e,
                           txt_ids=t, img_ids=i)[0])

T = the scheduler's num_train_timesteps (1000): FlowMatchEulerDiscreteScheduler hands out
timesteps s·T and the pipeline divides them by 1000 (the transformer multiplies timestep and
guidance by 1000 inside). e, p, t = encode_prompt(prompt) with __call__'s max_sequence_length
(512): T5's sequence, CLIP's pooled output and the text ids.

g: FLUX.1-dev is guidance-distilled: g is a float32 tensor (N,) of `guidance` (3.5, __call__'s
default), passed when transformer.config.guidance_embeds is set (FLUX.1-schnell has no such
embedding; guidance is then unused). No classifier-free guidance (true_cfg_scale stays off):
one call on the batch.

Packing: pack (N, C, h, w) → (N, (h/2)(w/2), 4C), token (i, j) in row-major order holding
x[c, 2i + a, 2j + b] at feature 4c + 2a + b; img_ids are (0, i, j) per token; unpack inverts
pack. Samples stay (C, h, w); packing happens inside `denoise`.

Latents: x0 = scaling_factor·(z − shift_factor) of AutoencoderKL; the VAE downsamples by
vae_scale_factor (8) and packing by 2, so the resolution is a multiple of 16.
"""

from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor

from spanlift.backbones.base import PipelineForm
from spanlift.backbones.flow_matching import (
    Embeddings,
    FlowMatchingBackbone,
    call_defaults,
    flow_timestep,
    folder_needs,
)
from spanlift.backbones.registry import BACKBONES

REPOSITORY = "black-forest-labs/FLUX.1-dev"
ENCODING = ("max_sequence_length",)
"""FluxPipeline.__call__'s keywords that shape the prompt encoding; their defaults are used."""


def pack(x: Tensor) -> Tensor:
    """(N, C, h, w) → (N, (h/2)(w/2), 4C): 2×2 patches as tokens (see the module docstring)."""
    n, c, h, w = x.shape
    patches = x.reshape(n, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5)
    return patches.reshape(n, (h // 2) * (w // 2), 4 * c)


def unpack(tokens: Tensor, height: int, width: int) -> Tensor:
    """(N, (h/2)(w/2), 4C) → (N, C, h, w), the inverse of `pack`."""
    n, _, features = tokens.shape
    patches = tokens.reshape(n, height // 2, width // 2, features // 4, 2, 2)
    return patches.permute(0, 3, 1, 4, 2, 5).reshape(n, features // 4, height, width)


def image_ids(rows: int, columns: int) -> Tensor:
    """Position ids (rows·columns, 3) of the packed tokens, row-major: (0, i, j) for token (i, j)."""
    i, j = torch.meshgrid(torch.arange(rows), torch.arange(columns), indexing="ij")
    return torch.stack([torch.zeros_like(i), i, j], dim=-1).reshape(-1, 3).float()


@BACKBONES.register("flux")
class Flux(FlowMatchingBackbone):
    """FLUX.1 text-to-image latent flow matching from a local FluxPipeline folder (guidance 3.5)."""

    pipeline_name = "FluxPipeline"
    repository = REPOSITORY
    components = (
        "transformer",
        "vae",
        "text_encoder",
        "tokenizer",
        "text_encoder_2",
        "tokenizer_2",
        "scheduler",
    )
    text_encoders = ("text_encoder", "text_encoder_2")
    needs: ClassVar[str] = folder_needs("FluxPipeline", REPOSITORY)

    def __init__(
        self,
        path: str | Path | None = None,
        prompts: str | Path | None = None,
        resolution: int = 1024,
        guidance: float = 3.5,
        dtype: str = "float32",
        sigma_min: float | None = None,
        sigma_max: float | None = None,
    ) -> None:
        super().__init__(path, prompts, resolution, guidance, dtype, sigma_min, sigma_max)
        self.encoding = call_defaults(self.pipeline, ENCODING)
        _, height, width = self.shape
        self.register_buffer("image_ids", image_ids(height // 2, width // 2), persistent=False)

    def latent_channels(self) -> int:
        return int(self.transformer.config.in_channels) // 4

    def pipeline_form(self) -> PipelineForm:
        """As every flow backbone's, its latents packed into 2×2 patches (`pack`)."""
        return replace(super().pipeline_form(), packed=True)

    def resolution_step(self) -> int:
        return self.pipeline.vae_scale_factor * 2

    def latent_shift(self) -> float:
        return float(self.vae.config.shift_factor or 0.0)

    def encode(self, texts: list[str]) -> Embeddings:
        """(T5 embeddings (N, L, D), CLIP pooled (N, P), text ids (N, L, 3)) of the prompts."""
        embeds, pooled, text_ids = self.pipeline.encode_prompt(
            prompt=texts, prompt_2=None, device=self.encoder_device(), **self.encoding
        )
        return embeds, pooled, text_ids.expand(len(texts), -1, -1)

    def guidance_input(self, n: int, device: torch.device) -> Tensor | None:
        """The guidance embedding's input (N,), float32; None for a model without one."""
        if not self.transformer.config.guidance_embeds:
            return None
        return torch.full((n,), self.guidance, device=device, dtype=torch.float32)

    def velocity(self, x_s: Tensor, s: Tensor, embeddings: Embeddings) -> Tensor:
        """v from one call on the packed batch, unpacked to (N, C, h, w)."""
        embeds, pooled, text_ids = embeddings
        n, _, height, width = x_s.shape
        dtype = self.transformer.dtype
        tokens = self.transformer(
            hidden_states=pack(x_s).to(dtype),
            timestep=(flow_timestep(s, self.train_timesteps) / 1000).to(dtype),
            guidance=self.guidance_input(n, x_s.device),
            pooled_projections=pooled.to(dtype),
            encoder_hidden_states=embeds.to(dtype),
            txt_ids=text_ids[0].to(dtype),
            img_ids=self.image_ids.to(dtype),
            return_dict=False,
        )[0]
        return unpack(tokens.float(), height, width)
