"""Every solver runs in the backbone's dtype: half-precision backbones (fp16 EDM, bf16 SANA/FLUX)
get a half-precision endpoint, with no float32 tensor slipping into a rollout."""

import pytest
import torch

from spanlift.backbones import load_backbone
from spanlift.platform.sampling.rollout import rollout
from spanlift.platform.sampling.teacher import generate_teacher, teacher_for
from spanlift.solvers import SOLVERS, SolverSpec, build_solver

from .conftest import noise_like

HALF = (torch.bfloat16, torch.float16)


def specs():
    for name in SOLVERS.names():
        if name in ("spanlift", "ld3"):
            continue
        yield SolverSpec(name, 4 if name in ("amed", "amed_plugin", "epd", "epd_plugin") else 3)
    for base in ("euler", "heun", "ipndm", "dyweight", "dpm_solver_pp", "dlms"):
        for name in ("spanlift", "ld3"):
            yield SolverSpec(name, 5 if base == "heun" else 4, settings={"base": base})


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_digits_denoiser_answers_in_its_dtype(dtype):
    backbone = load_backbone("digits").freeze().to(dtype)
    x = noise_like(backbone, 2, dtype=dtype)
    assert backbone.denoise(x, torch.tensor(2.0, dtype=dtype)).dtype == dtype


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("spec", list(specs()), ids=SolverSpec.label)
def test_every_solver_rolls_out_in_the_backbones_dtype(spec, dtype):
    backbone = load_backbone("digits").freeze().to(dtype)
    solver = build_solver(spec, backbone.sigma_min, backbone.sigma_max, backbone.shape[0])
    with torch.no_grad():
        out = rollout(solver, backbone, noise_like(backbone, 2, dtype=dtype))
    assert out.dtype == dtype
    assert torch.isfinite(out).all()


def test_a_teacher_made_on_demand_leaves_the_backbone_where_it_is(monkeypatch):
    """A trajectory-supervised solver's teacher states are generated on demand; that must run on
    the backbone's device, not move a GPU backbone to the CPU under the fit (every later fit on
    the GPU then failed with tensors on two devices)."""
    backbone = load_backbone("gmm")
    moves = []
    original = type(backbone).to

    def recording_to(self, *args, **kwargs):
        moves.append(args)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(type(backbone), "to", recording_to)
    solver = build_solver(SolverSpec("amed", 4), backbone.sigma_min, backbone.sigma_max, 1)
    endpoints = generate_teacher(backbone, range(4), SolverSpec("heun", 9), progress=False)
    data = teacher_for(solver, endpoints, backbone)
    assert data.states is not None
    assert moves == []
