"""Between a pipeline's loop and spanlift's σ-form, by the backbone's parameterisation: the same
functions the backbones' denoisers call (backbones/flow_matching.py), dispatched on
`PipelineForm.parameterisation` (backbones/base.py: PARAMETERISATIONS).

    denoiser:  model input x̃,            timestep σ,        D = the model's output
    flow:      model input x̃/(1 + σ),    timestep s·T,      D = x_s − s·v,  s = σ/(1 + σ)

FLUX's pipeline packs latents into 2×2 patches (backbones/flux.py: pack, unpack): a packed form
unpacks the pipeline's tensors before converting them and packs what it hands back.
"""

from torch import Tensor

from spanlift.backbones.base import PipelineForm
from spanlift.backbones.flow_matching import flow_denoised, flow_latent, flow_time, flow_timestep
from spanlift.backbones.flux import pack, unpack


def model_input(form: PipelineForm, x: Tensor, sigma: Tensor) -> Tensor:
    """What the pipeline's model is called on for the σ-form state x at σ (unpacked)."""
    return flow_latent(x, sigma) if form.parameterisation == "flow" else x


def timestep(form: PipelineForm, sigma: Tensor) -> Tensor:
    """The pipeline's timestep of the noise level σ."""
    if form.parameterisation == "flow":
        return flow_timestep(flow_time(sigma), form.train_timesteps)
    return sigma


def denoised(form: PipelineForm, sample: Tensor, sigma: Tensor, output: Tensor) -> Tensor:
    """D(x̃, σ) from the model's output on `sample` (the model input of x̃ at σ; unpacked)."""
    if form.parameterisation == "flow":
        return flow_denoised(sample, flow_time(sigma), output)
    return output


def to_pipeline(form: PipelineForm, x: Tensor) -> Tensor:
    """A batch (N, C, h, w) in the pipeline's layout: packed for FLUX, else as it is."""
    return pack(x) if form.packed else x


def from_pipeline(form: PipelineForm, x: Tensor) -> Tensor:
    """A batch in the pipeline's layout as (N, C, h, w)."""
    return unpack(x, *form.shape[1:]) if form.packed else x


def pipeline_shape(form: PipelineForm) -> tuple[int, ...]:
    """One sample's shape in the pipeline's layout: (h/2·w/2, 4C) packed, else (C, h, w)."""
    if form.packed:
        channels, height, width = form.shape
        return ((height // 2) * (width // 2), 4 * channels)
    return tuple(form.shape)
