"""A solver exported as a diffusers scheduler samples in the pipelines as spanlift's own rollout
does: tiny SANA and FLUX pipelines of the real diffusers classes, and the tiny EDM pickle in the
standard diffusers loop; analytic, perturbed-as-fitted and two-calls-per-step solvers, AFS; NFE
counted on the transformer; save → load; every bad input's error; the command line."""

import json
import sys
from pathlib import Path

import pytest
import torch
from diffusers import FluxPipeline, SanaPipeline
from torch import Tensor

from spanlift.backbones import load_backbone
from spanlift.backbones.base import conditioned
from spanlift.backbones.flux import Flux, pack, unpack
from spanlift.backbones.sana import Sana
from spanlift.cli import main
from spanlift.errors import CheckpointError, SettingsError
from spanlift.export.scheduler import SpanLiftScheduler, export_diffusers
from spanlift.solvers import SolverSpec, build_solver
from tests.edm_package import forget_edm_code, write_edm_code, write_edm_pickle
from tests.test_diffusers_flow import PROMPTS, flux_pipeline, mjhq_entries, sana_pipeline

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

SEEDS = [0, 3]
SOLVERS = [
    SolverSpec("ipndm", 4, settings={"order": 3}),
    SolverSpec("heun", 5),  # two calls per step
    SolverSpec("dyweight", 4),
    SolverSpec("dyweight", 4, settings={"afs": True}),  # no call at the first step
    SolverSpec("spanlift", 3, settings={"base": "dyweight", "kernel_size": 3}),
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("export")
    sana_pipeline().save_pretrained(root / "sana")
    flux_pipeline().save_pretrained(root / "flux")
    prompts = root / "meta_data.json"
    prompts.write_text(json.dumps(mjhq_entries(PROMPTS)))
    return {"sana": root / "sana", "flux": root / "flux", "prompts": prompts, "root": root}


@pytest.fixture(scope="module")
def sana(folders) -> Sana:
    return Sana(path=folders["sana"], prompts=folders["prompts"], resolution=32)


@pytest.fixture(scope="module")
def sana_pipe(folders) -> SanaPipeline:
    """The saved SANA pipeline, loaded once; each test gives it its own scheduler."""
    pipe = SanaPipeline.from_pretrained(folders["sana"], local_files_only=True)
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.fixture(scope="module")
def flux(folders) -> Flux:
    return Flux(path=folders["flux"], prompts=folders["prompts"], resolution=16)


def fitted(spec: SolverSpec, backbone) -> torch.nn.Module:
    """The solver with every learned parameter moved off its initial value, deterministically
    (as a fit leaves it): its samples then differ from the untrained solver's."""
    solver = build_solver(spec, backbone.sigma_min, backbone.sigma_max, backbone.shape[0])
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for parameter in solver.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    return solver


class Calls:
    """Counts a transformer's calls and keeps the first call's latent input (first rows)."""

    def __init__(self, transformer: torch.nn.Module, rows: int) -> None:
        self.count, self.first, self.rows = 0, None, rows
        self.hook = transformer.register_forward_pre_hook(self.record, with_kwargs=True)

    def record(self, module, args, kwargs) -> None:
        if self.first is None:
            self.first = (args[0] if args else kwargs["hidden_states"])[: self.rows].float()
        self.count += 1

    def __enter__(self) -> "Calls":
        return self

    def __exit__(self, *exc) -> None:
        self.hook.remove()


def spanlift_rollout(backbone, solver, noise: Tensor) -> tuple[Tensor, Tensor]:
    """spanlift's own sample and the first model input its rollout gave the transformer."""
    cond = backbone.conditioning(SEEDS)
    with Calls(backbone.transformer, len(noise)) as calls, torch.no_grad():
        sample = solver(conditioned(backbone, cond), backbone.prior(noise))
    return sample, calls.first


FLOW_ROUNDING = 3e-4
"""Float32 rounding through a flow pipeline: the scheduler rebuilds spanlift's state from the
pipeline's latents, x = x_s·(1 + σ) with σ up to 999, so one rounding of x_s is a thousand times
larger in x; the largest difference seen is 1.1e-4 (Heun on SANA, one torch thread)."""


def loaded(solver, backbone, folder: Path) -> SpanLiftScheduler:
    export_diffusers(solver, backbone, folder)
    return SpanLiftScheduler.from_pretrained(folder)


@pytest.mark.parametrize("spec", SOLVERS, ids=lambda s: s.label())
def test_sana_pipeline_samples_as_spanlifts_rollout(spec, sana, sana_pipe, tmp_path) -> None:
    solver = fitted(spec, sana)
    noise = torch.randn(len(SEEDS), *sana.shape, generator=torch.Generator().manual_seed(1))
    expected, first_input = spanlift_rollout(sana, solver, noise)
    pipe = sana_pipe
    pipe.scheduler = loaded(solver, sana, tmp_path / "scheduler")
    with Calls(pipe.transformer, len(SEEDS)) as calls:
        latents = pipe(
            prompt=sana.prompts(SEEDS),
            num_inference_steps=spec.nfe,
            guidance_scale=sana.guidance,
            height=32,
            width=32,
            latents=first_input,
            output_type="latent",
            use_resolution_binning=False,
        ).images
    assert calls.count == spec.nfe
    torch.testing.assert_close(latents, expected, rtol=1e-4, atol=FLOW_ROUNDING)
    assert not torch.allclose(expected, first_input, atol=1e-2)


@pytest.mark.parametrize("spec", [SOLVERS[0], SOLVERS[4]], ids=lambda s: s.label())
def test_flux_pipeline_samples_as_spanlifts_rollout(spec, flux, folders, tmp_path) -> None:
    solver = fitted(spec, flux)
    noise = torch.randn(len(SEEDS), *flux.shape, generator=torch.Generator().manual_seed(2))
    expected, first_input = spanlift_rollout(flux, solver, noise)
    pipe = FluxPipeline.from_pretrained(folders["flux"], local_files_only=True)
    pipe.set_progress_bar_config(disable=True)
    pipe.scheduler = loaded(solver, flux, tmp_path / "scheduler")
    with Calls(pipe.transformer, len(SEEDS)) as calls:
        packed = pipe(
            prompt=flux.prompts(SEEDS),
            num_inference_steps=spec.nfe,
            guidance_scale=flux.guidance,
            height=16,
            width=16,
            latents=first_input,
            output_type="latent",
        ).images
    assert calls.count == spec.nfe
    torch.testing.assert_close(unpack(packed, 8, 8), expected, rtol=1e-4, atol=FLOW_ROUNDING)
    assert torch.equal(pack(unpack(first_input, 8, 8)), first_input)


@pytest.fixture(scope="module")
def edm(tmp_path_factory):
    root = tmp_path_factory.mktemp("edm")
    code = write_edm_code(root / "edm")
    weights = write_edm_pickle(code, root / "net.pkl")
    yield load_backbone("edm", weights=str(weights), allow_pickle=True, code=str(code))
    forget_edm_code(code)


def diffusers_loop(
    scheduler: SpanLiftScheduler, model, noise: Tensor, steps: int, dtype=torch.float32
) -> Tensor:
    """The standard diffusers denoising loop, the model a denoiser at timestep σ (the folder's
    parameterisation `denoiser`)."""
    scheduler.set_timesteps(steps)
    x = (noise * scheduler.init_noise_sigma).to(dtype)
    for t in scheduler.timesteps:
        out = model(scheduler.scale_model_input(x, t), t)
        x = scheduler.step(out, t, x).prev_sample
    return x


@pytest.mark.parametrize("spec", SOLVERS, ids=lambda s: s.label())
def test_edm_network_in_the_diffusers_loop_samples_as_spanlifts_rollout(
    spec, edm, tmp_path
) -> None:
    solver = fitted(spec, edm)
    noise = torch.randn(3, *edm.shape, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = solver(conditioned(edm, None), edm.prior(noise))
    calls = []

    def network(x: Tensor, t: Tensor) -> Tensor:
        calls.append(float(t))
        return edm.net(x, t.reshape(()))

    scheduler = loaded(solver, edm, tmp_path / "scheduler")
    assert scheduler.config.parameterisation == "denoiser"
    with torch.no_grad():
        sample = diffusers_loop(scheduler, network, noise, spec.nfe)
    assert len(calls) == spec.nfe
    torch.testing.assert_close(sample, expected, rtol=1e-4, atol=1e-4)
    scheduler.save_pretrained(tmp_path / "again")
    again = SpanLiftScheduler.from_pretrained(tmp_path / "again")
    with torch.no_grad():
        assert torch.equal(diffusers_loop(again, network, noise, spec.nfe), sample)


def test_a_bfloat16_pipeline_gets_bfloat16_latents_from_float32_arithmetic(edm, tmp_path) -> None:
    solver = fitted(SOLVERS[4], edm)
    scheduler = loaded(solver, edm, tmp_path / "scheduler")
    noise = torch.randn(2, *edm.shape, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full = diffusers_loop(scheduler, lambda x, t: edm.net(x, t.reshape(())), noise, 3)
        half = diffusers_loop(
            scheduler,
            lambda x, t: edm.net(x.float(), t.reshape(())).bfloat16(),
            noise,
            3,
            torch.bfloat16,
        )
    assert half.dtype == torch.bfloat16
    assert (half.float() - full).abs().max() < 0.05 * full.abs().max()


def test_bad_inputs_are_one_clear_error(sana, sana_pipe, flux, edm, folders, tmp_path) -> None:
    spatial = loaded(fitted(SOLVERS[4], sana), sana, tmp_path / "sana")
    with pytest.raises(SettingsError, match=r"made for num_inference_steps=3 \(its NFE\), got 20"):
        spatial.set_timesteps(20)
    with pytest.raises(SettingsError, match=r"own timesteps"):
        spatial.set_timesteps(timesteps=[900, 500, 100])
    pipe = FluxPipeline.from_pretrained(folders["flux"], local_files_only=True)
    pipe.set_progress_bar_config(disable=True)
    pipe.scheduler = spatial
    with pytest.raises(SettingsError, match=r"exported for sana latents .*another model family"):
        pipe(prompt=["a cat"], num_inference_steps=3, height=16, width=16, output_type="latent")
    sana_pipe.scheduler = spatial
    with pytest.raises(SettingsError, match=r"fitted at latent size \(4, 8, 8\)"):
        sana_pipe(
            prompt=["a cat"], num_inference_steps=3, height=64, width=64,
            output_type="latent", use_resolution_binning=False,
        )  # fmt: skip
    with pytest.raises(SettingsError, match="cannot be exported"):
        export_diffusers(build_solver(SolverSpec("epd", 4), 0.002, 80, 3), edm, tmp_path / "e")
    (tmp_path / "sana" / "solver.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"solver\.safetensors is missing"):
        SpanLiftScheduler.from_pretrained(tmp_path / "sana")
    with pytest.raises(CheckpointError, match=r"has no scheduler_config\.json"):
        SpanLiftScheduler.from_pretrained(tmp_path / "nowhere")
    old = loaded(fitted(SOLVERS[0], edm), edm, tmp_path / "old")
    config = json.loads((tmp_path / "old" / "scheduler_config.json").read_text())
    (tmp_path / "old" / "scheduler_config.json").write_text(
        json.dumps({**config, "spanlift_format": 0})
    )
    with pytest.raises(CheckpointError, match=r"format version 0; this spanlift reads version 1"):
        SpanLiftScheduler.from_pretrained(tmp_path / "old")
    old.set_timesteps(4)
    with pytest.raises(SettingsError, match=r"step 0 got timestep 5, expected 80"):
        old.step(torch.zeros(1, 3, 8, 8), 5.0, torch.zeros(1, 3, 8, 8))


def test_spanlift_imports_without_diffusers(monkeypatch) -> None:
    for name in [name for name in sys.modules if name.split(".")[0] == "diffusers"]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "spanlift.export.scheduler")
    import spanlift.export

    with pytest.raises(SettingsError, match=r"pip install 'spanlift\[diffusers\]'"):
        spanlift.export.SpanLiftScheduler  # noqa: B018


def test_export_from_a_fit_run_a_checkpoint_and_a_spec(tmp_path, capsys) -> None:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    fit = ["fit", "--backbone", "gmm", "--solver", "dyweight", "--nfe", "3", "--iterations", "2"]
    fit += ["--train-samples", "8", "--validation-samples", "4", "--test-samples", "4"]
    assert main([*fit, "--tracking-uri", uri, "--out", str(tmp_path / "fit")]) == 0
    run_id = capsys.readouterr().out.split("MLflow run ")[1].split()[0]
    checkpoint = next((tmp_path / "fit").rglob("dyweight-*.pt"))
    out = tmp_path / "out"
    assert (
        main(["export", run_id, "--to", "diffusers", str(out / "run"), "--tracking-uri", uri]) == 0
    )
    assert "num_inference_steps=3" in capsys.readouterr().out
    assert (
        main(["export", str(checkpoint), "--backbone", "gmm", "--to", "diffusers", str(out / "pt")])
        == 0
    )
    spec = ["--solver", "ipndm", "--nfe", "5", "--backbone", "gmm"]
    assert main(["export", *spec, "--to", "diffusers", str(out / "spec")]) == 0
    run, file = (SpanLiftScheduler.from_pretrained(out / name) for name in ("run", "pt"))
    for name, value in run.solver.state_dict().items():
        assert torch.equal(value, file.solver.state_dict()[name])
    assert SpanLiftScheduler.from_pretrained(out / "spec").nfe == 5
    capsys.readouterr()
    bad = [
        (["export", "nope", "--to", "diffusers", str(out / "x"), "--tracking-uri", uri],
         "neither a checkpoint file nor a run"),
        (["export", "--to", "diffusers", str(out / "x")], "RUN_ID, a CHECKPOINT, or --solver"),
        (["export", *spec, "--to", "onnx", str(out / "x")], "unknown format"),
        (["export", run_id, "--backbone", "gmm", "--to", "diffusers", str(out / "x"),
          "--tracking-uri", uri], "names its backbone"),
        (["export", "--solver", "epd", "--nfe", "4", "--backbone", "gmm", "--to", "diffusers",
          str(out / "x")], "cannot be exported"),
    ]  # fmt: skip
    for argv, message in bad:
        assert main(argv) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and message in lines[0]
    assert not (out / "x").exists()
