"""Every solver runs in the backbone's dtype and on its device: half-precision backbones (fp16
EDM, bf16 SANA/FLUX) get a half-precision endpoint, with no float32 tensor slipping into a
rollout; on the `meta` device (shapes without data) a CPU tensor created inside a rollout, or a
value read back from the device to branch on, fails as it would cost a copy on a GPU."""

import pytest
import torch

from spanlift.backbones import Backbone, load_backbone
from spanlift.nowcasting.synthetic import write_synthetic_sevir
from spanlift.platform.sampling.rollout import rollout
from spanlift.platform.sampling.teacher import generate_teacher, teacher_for
from spanlift.solvers import SolverSpec, build_solver

from .conftest import NATIVE_SOLVERS, noise_like

HALF = (torch.bfloat16, torch.float16)


def specs():
    for name in NATIVE_SOLVERS:
        if name in ("spanlift", "ld3"):
            continue
        nfe = 4 if name in ("amed", "amed_plugin", "epd", "epd_plugin") else 3
        if name == "dpm_solver_v3":  # statistics come from a fit; degenerated ones here
            yield SolverSpec(name, nfe, settings={"degenerated": True})
            continue
        yield SolverSpec(name, 5 if name == "ds_solver" else nfe)  # ds_solver: its tables' NFEs
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


EMBEDDED = ("gmm", "digits", "nowcast")
"""The backbones that ship with their weights (the nowcasting UNet reads its conditioning from a
small synthetic SEVIR set)."""


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Backbone]:
    storms = write_synthetic_sevir(
        tmp_path_factory.mktemp("storms") / "sevir", events=2, seed=0, progress=False
    )
    options = {"nowcast": {"data": str(storms)}}
    return {name: load_backbone(name, **options.get(name, {})).freeze() for name in EMBEDDED}


@pytest.mark.parametrize("backbone_name", EMBEDDED)
def test_every_solver_rolls_out_on_the_backbones_device(embedded, backbone_name):
    """Parameters, noise and conditioning on `meta`: the endpoint must be there too, for every
    registered solver (and SpanLift, LD3 over every base) but DPM-Solver-v3, whose coefficient
    tables are integrals of its statistics, computed once per grid on the host."""
    source = embedded[backbone_name]
    cond = source.conditioning(range(2))
    backbone = source.to("meta")  # the fixture's backbones serve this test alone
    failures = []
    for spec in specs():
        if spec.name == "dpm_solver_v3":  # its coefficients integrate its statistics on the host
            continue
        solver = build_solver(spec, backbone.sigma_min, backbone.sigma_max, backbone.shape[0])
        noise = torch.randn(2, *backbone.shape, device="meta")
        try:
            with torch.no_grad():
                out = rollout(solver.to("meta"), backbone, noise, on_meta(cond))
            assert out.device.type == "meta" and out.shape == noise.shape
        except (RuntimeError, AssertionError, NotImplementedError) as exc:
            failures.append(f"{spec.label()} nfe={spec.nfe}: {str(exc).splitlines()[0]}")
    assert not failures, "\n".join(failures)


def on_meta(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.to("meta")
