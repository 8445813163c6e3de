"""SANA (Xie et al., ICLR 2025) from a local SanaPipeline folder, in EDM σ-form.

The σ-form, prompts, NFE and identity: flow_matching.py. The folder, e.g.
`Efficient-Large-Model/Sana_600M_512px_diffusers`, holds transformer/ (SanaTransformer2DModel),
vae/ (AutoencoderDC), text_encoder/ (Gemma 2), tokenizer/ and scheduler/.

The transformer is called as SanaPipeline.__call__ (diffusers 0.42.1) calls it:

    v = transformer(x_s, encoder_hidden_states=e, encoder_attention_mask=m,
                    timestep=s·T·timestep_scale)[0]

T = the scheduler's num_train_timesteps (1000): the pipeline's DPMSolverMultistepScheduler with
use_flow_sigmas hands out timesteps s·T (cast to integers; here s·T exactly) and the pipeline
multiplies them by transformer.config.timestep_scale. e, m = encode_prompt(prompt) with
__call__'s defaults for clean_caption, max_sequence_length (300) and complex_human_instruction
(the instruction template put before each prompt).

Classifier-free guidance with the empty negative prompt (encode_prompt's negative embeddings,
no template), PAG off, g = guidance (4.5, __call__'s default), in ONE transformer call on the
doubled batch [unconditional; conditional]:

    v = v_u + g·(v_c − v_u).

guidance ≤ 1 turns it off as in the pipeline: one call on the batch, v = v_c. A transformer with
twice the latent channels out (learned variance) gives its first half, as the pipeline keeps it.

Latents: x0 = scaling_factor·z of AutoencoderDC (no shift); the VAE downsamples by
vae_scale_factor (32), the transformer's patch is 1, so the resolution is a multiple of 32.
"""

from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor

from spanlift.backbones.flow_matching import (
    Embeddings,
    FlowMatchingBackbone,
    call_defaults,
    flow_timestep,
    folder_needs,
)
from spanlift.backbones.registry import BACKBONES

REPOSITORY = "Efficient-Large-Model/Sana_600M_512px_diffusers"
ENCODING = ("clean_caption", "max_sequence_length", "complex_human_instruction")
"""SanaPipeline.__call__'s keywords that shape the prompt encoding; their defaults are used."""


@BACKBONES.register("sana")
class Sana(FlowMatchingBackbone):
    """SANA text-to-image latent flow matching from a local SanaPipeline folder (CFG 4.5)."""

    pipeline_name = "SanaPipeline"
    repository = REPOSITORY
    components = ("transformer", "vae", "text_encoder", "tokenizer", "scheduler")
    text_encoders = ("text_encoder",)
    needs: ClassVar[str] = folder_needs("SanaPipeline", REPOSITORY)

    def __init__(
        self,
        path: str | Path | None = None,
        prompts: str | Path | None = None,
        resolution: int = 512,
        guidance: float = 4.5,
        dtype: str = "float32",
        sigma_min: float | None = None,
        sigma_max: float | None = None,
    ) -> None:
        super().__init__(path, prompts, resolution, guidance, dtype, sigma_min, sigma_max)
        self.encoding = call_defaults(self.pipeline, ENCODING)
        negative, negative_mask = self.encode_negative()
        self.register_buffer("negative", negative, persistent=False)
        self.register_buffer("negative_mask", negative_mask, persistent=False)

    def latent_channels(self) -> int:
        return int(self.transformer.config.in_channels)

    def resolution_step(self) -> int:
        return self.pipeline.vae_scale_factor * int(self.transformer.config.patch_size)

    def latent_shift(self) -> float:
        return 0.0

    def encode(self, texts: list[str]) -> Embeddings:
        """(embeddings (N, L, D), attention mask (N, L)) of the prompts, as the pipeline's."""
        embeds, mask, _, _ = self.pipeline.encode_prompt(
            texts, do_classifier_free_guidance=False, device=self.encoder_device(), **self.encoding
        )
        return embeds, mask

    @torch.no_grad()
    def encode_negative(self) -> tuple[Tensor, Tensor]:
        """The empty negative prompt's (embeddings (1, L, D), mask (1, L))."""
        _, _, embeds, mask = self.pipeline.encode_prompt(
            [""],
            do_classifier_free_guidance=True,
            negative_prompt="",
            device=self.encoder_device(),
            **self.encoding,
        )
        return embeds, mask

    def velocity(self, x_s: Tensor, s: Tensor, embeddings: Embeddings) -> Tensor:
        """v = v_u + g·(v_c − v_u) from one call on the doubled batch (v_c when g ≤ 1)."""
        embeds, mask = embeddings
        timestep = flow_timestep(s.float(), self.train_timesteps)
        timestep = timestep * self.transformer.config.timestep_scale
        if self.guidance <= 1:
            return self.call_transformer(x_s, timestep, embeds, mask)
        n = len(x_s)
        both = self.call_transformer(
            torch.cat([x_s, x_s]),
            torch.cat([timestep, timestep]),
            torch.cat([self.negative.expand(n, -1, -1), embeds]),
            torch.cat([self.negative_mask.expand(n, -1), mask]),
        )
        unconditional, conditional = both.chunk(2)
        return unconditional + self.guidance * (conditional - unconditional)

    def call_transformer(self, x: Tensor, timestep: Tensor, embeds: Tensor, mask: Tensor) -> Tensor:
        """The transformer's output on x (in its dtype), float32, first C channels."""
        dtype = self.transformer.dtype
        v = self.transformer(
            x.to(dtype),
            encoder_hidden_states=embeds.to(dtype),
            encoder_attention_mask=mask,
            timestep=timestep,
            return_dict=False,
        )[0]
        return v.float()[:, : x.shape[1]]
