"""`diffusers:<SchedulerClass>` solvers against diffusers' own schedulers.

Reference side: the scheduler classes of diffusers 0.42.1 (huggingface/diffusers, spanlift's
`diffusers` extra), run as diffusers' documentation writes a denoising loop (`set_timesteps`,
then per timestep `scale_model_input`, the model, `step`) on the Gaussian mixture's exact
denoiser, wrapped as a model that answers in the scheduler's prediction type at the σ the
scheduler holds for the call. spanlift's side is the registered solver, its NFE counted by
`NFECounter`. Separately: the σ each solver calls the model at are the platform's grid (to the
scheduler's float32 table), and the schedulers that are spanlift solvers under another name
(Euler, DDIM, Heun, DPM-Solver++, UniPC) land where those solvers do.
"""

import copy
import itertools
import math
import subprocess
import sys

import pytest
import torch

from spanlift.errors import SettingsError, UnreachableNFEError
from spanlift.solvers import SOLVERS, NFECounter, SolverSpec, build_solver
from spanlift.solvers.schedules import SCHEDULES

from .conftest import noise_like

diffusers = pytest.importorskip("diffusers")

SCHEDULERS = sorted(name for name in SOLVERS.names() if name.startswith("diffusers:"))
TO_ZERO_ONLY = {"HeunDiscreteScheduler", "KDPM2DiscreteScheduler", "LMSDiscreteScheduler"}
ABOVE_ZERO_ONLY = {"DEISMultistepScheduler", "SASolverScheduler"}
TWO_PER_STEP = {"HeunDiscreteScheduler", "KDPM2DiscreteScheduler"}


def schedules(name: str) -> list[str]:
    scheduler = name.removeprefix("diffusers:")
    if scheduler in TO_ZERO_ONLY:
        return ["edm_to_zero"]
    return ["edm"] if scheduler in ABOVE_ZERO_ONLY else ["edm", "edm_to_zero"]


def cases():
    """Every scheduler on every schedule end it follows, at a small and a larger NFE (odd for
    Heun and KDPM2, which spend 2N − 1), and the settings that change the algorithm."""
    variants = {
        "DPMSolverMultistepScheduler": [
            {"algorithm_type": kind, "solver_order": order}
            for kind in ("dpmsolver", "dpmsolver++")
            for order in (2, 3)
        ],
        "DPMSolverSinglestepScheduler": [
            {"algorithm_type": "dpmsolver++", "solver_order": 3},
            {"algorithm_type": "dpmsolver", "solver_order": 2},
        ],
        "UniPCMultistepScheduler": [{"solver_type": "bh1", "solver_order": 3}, {}],
        "DEISMultistepScheduler": [{"solver_order": 3}],
        "SASolverScheduler": [{"predictor_order": 3, "corrector_order": 3}],
        "EulerDiscreteScheduler": [{"prediction_type": "v_prediction"}],
        "DDIMScheduler": [{"prediction_type": "sample", "clip_sample": False}, {}],
    }
    for name in SCHEDULERS:
        scheduler = name.removeprefix("diffusers:")
        for schedule in schedules(name):
            for settings in variants.get(scheduler, [{}]):
                if schedule == "edm_to_zero" and (
                    settings.get("algorithm_type") == "dpmsolver"
                    or settings.get("solver_type") == "bh1"
                ):
                    continue  # refused (DPM-Solver, UniPC-bh1 cannot step to 0): tested below
                for nfe in (3, 9) if scheduler in TWO_PER_STEP else (4, 10):
                    yield name, schedule, settings, nfe


def current_sigma(scheduler, timestep) -> float:
    """The σ the scheduler's `step` reads for this model call, from its public state: ᾱ at the
    timestep (DDIM, PNDM), the log-midpoint in a KDPM2 step's second call, else σ at its step."""
    if isinstance(scheduler, diffusers.DDIMScheduler | diffusers.PNDMScheduler):
        alpha = scheduler.alphas_cumprod[int(timestep)]
        return float(((1 - alpha) / alpha).sqrt())
    index = scheduler.step_index if scheduler.step_index is not None else 0
    kdpm2 = isinstance(scheduler, diffusers.KDPM2DiscreteScheduler)
    if kdpm2 and not scheduler.state_in_first_order:
        return float(scheduler.sigmas_interpol[index])
    return float(scheduler.sigmas[index])


def as_model(backbone, scheduler, prediction_type: str, calls: list):
    """The backbone's denoiser as a diffusers model: input x/sqrt(1 + σ²), output ε, x0 or v."""

    def model(model_input, timestep):
        sigma = current_sigma(scheduler, timestep)
        scale = math.sqrt(1 + sigma**2)
        x = model_input * scale
        denoised = backbone.denoise(x, torch.tensor(sigma))
        calls.append(sigma)
        epsilon = (x - denoised) / sigma
        return {
            "epsilon": epsilon,
            "sample": denoised,
            "v_prediction": (epsilon - sigma * denoised) / scale,
        }[prediction_type]

    return model


def diffusers_loop(solver, backbone, x):
    """diffusers' documented loop on a fresh scheduler set up on the solver's grid; a VP
    scheduler's state is x/sqrt(1 + σ²) (σ-space schedulers, init_noise_sigma > 1, hold x)."""
    grid = solver.host_grid()
    scheduler = solver.scheduler(grid)
    calls: list[float] = []
    model = as_model(backbone, scheduler, scheduler.config.prediction_type, calls)
    vp = scheduler.init_noise_sigma == 1.0
    sample = x / math.sqrt(1 + float(grid[0]) ** 2) if vp else x
    for timestep in scheduler.timesteps:
        model_input = scheduler.scale_model_input(sample, timestep)
        output = model(model_input, timestep)
        sample = scheduler.step(output, timestep, sample).prev_sample
    return (sample * math.sqrt(1 + float(grid[-1]) ** 2) if vp else sample), calls


def build(gmm, name, nfe, schedule="edm", settings=None):
    spec = SolverSpec(name, nfe, schedule, dict(settings or {}))
    return build_solver(spec, gmm.sigma_min, gmm.sigma_max, 1)


@pytest.mark.parametrize(("name", "schedule", "settings", "nfe"), list(cases()))
def test_endpoint_is_the_schedulers_own_loop(gmm, name, schedule, settings, nfe):
    solver = build(gmm, name, nfe, schedule, settings)
    x = gmm.prior(noise_like(gmm, 4))
    counter = NFECounter(gmm.denoise)
    with torch.no_grad():
        ours = solver(counter, x)
        theirs, calls = diffusers_loop(solver, gmm, x)
    assert counter.calls == len(calls) == nfe == solver.nfe
    torch.testing.assert_close(ours, theirs, rtol=0, atol=2e-6)


def expected_sigmas(name: str, grid: list[float]) -> list[float]:
    """The σ of each model call, from the grid: σ_0 … σ_{N−1}; Heun's second call of a step at
    σ_{i+1}; KDPM2's at √(σ_i σ_{i+1}); PNDM's first step evaluated again at σ_1."""
    n, scheduler = len(grid) - 1, name.removeprefix("diffusers:")
    if scheduler == "HeunDiscreteScheduler":
        return [grid[0], *(s for s in grid[1:n] for _ in (0, 1))]
    if scheduler == "KDPM2DiscreteScheduler":
        midpoints = [math.sqrt(a * b) for a, b in itertools.pairwise(grid[:n])]
        return [grid[0], *(s for pair in zip(midpoints, grid[1:n], strict=True) for s in pair)]
    if scheduler == "PNDMScheduler":
        return [grid[0], grid[1], *grid[1:n]]
    return grid[:n]


def recording(backbone, seen: list):
    def denoise(x, sigma):
        seen.append(float(sigma))
        return backbone.denoise(x, sigma)

    return denoise


@pytest.mark.parametrize("schedule", ["edm", "edm_to_zero", "logsnr", "time"])
@pytest.mark.parametrize("name", SCHEDULERS)
def test_the_model_is_called_on_the_platforms_grid(gmm, name, schedule):
    """Within float32 (Euler, given the grid) or the float32 ᾱ table (the others): 0.25 % below
    σ = 0.01, 10⁻⁴ above 0.05 (diffusers_schedulers module docstring)."""
    if schedule not in schedules(name) and schedule in ("edm", "edm_to_zero"):
        pytest.skip("refused: tested in test_a_grid_the_scheduler_cannot_follow_is_refused")
    if name.removeprefix("diffusers:") in TO_ZERO_ONLY and schedule in ("logsnr", "time"):
        pytest.skip("ends at σ = 0 only")
    solver = build(gmm, name, 9 if name.removeprefix("diffusers:") in TWO_PER_STEP else 8, schedule)
    seen: list[float] = []
    with torch.no_grad():
        solver(recording(gmm, seen), gmm.prior(noise_like(gmm, 2)))
    expected = torch.tensor(expected_sigmas(name, solver.sigmas.tolist()), dtype=torch.float64)
    seen_t = torch.tensor(seen, dtype=torch.float64)
    assert len(seen) == len(expected)
    tolerance = torch.where(expected < 0.01, 2.5e-3, torch.where(expected < 0.05, 5e-4, 1e-4))
    assert ((seen_t - expected).abs() / expected <= tolerance).all(), (seen, expected.tolist())


SAME_AS_SPANLIFT = [
    ("EulerDiscreteScheduler", "edm", {}, "euler", {}),
    ("DDIMScheduler", "edm", {"clip_sample": False}, "euler", {}),
    ("DDIMScheduler", "edm_to_zero", {"clip_sample": False}, "euler", {}),
    ("HeunDiscreteScheduler", "edm_to_zero", {}, "heun", {}),
    ("DPMSolverMultistepScheduler", "edm", {}, "dpm_solver_pp", {"order": 2}),
    ("DPMSolverMultistepScheduler", "edm", {"solver_order": 3}, "dpm_solver_pp", {"order": 3}),
    ("DPMSolverMultistepScheduler", "edm_to_zero", {}, "dpm_solver_pp", {"order": 2}),
    ("UniPCMultistepScheduler", "edm", {}, "unipc", {"order": 2}),
    ("UniPCMultistepScheduler", "edm_to_zero", {"solver_order": 3}, "unipc", {"order": 3}),
]


@pytest.mark.parametrize(
    ("scheduler", "schedule", "settings", "ours", "our_settings"), SAME_AS_SPANLIFT
)
def test_a_scheduler_spanlift_also_has_lands_where_spanlifts_solver_does(
    gmm, scheduler, schedule, settings, ours, our_settings
):
    """Same grid, same method, two implementations: their whole trajectories agree to the
    float32 arithmetic of the schedulers (a few 10⁻⁵ on data of scale 1)."""
    nfe = 7
    peer = build(gmm, f"diffusers:{scheduler}", nfe, schedule, settings)
    native = build(gmm, ours, nfe, schedule, our_settings)
    x = gmm.prior(noise_like(gmm, 8))
    with torch.no_grad():
        torch.testing.assert_close(
            peer(gmm.denoise, x, trajectory=True),
            native(gmm.denoise, x, trajectory=True),
            rtol=0,
            atol=3e-4,
        )


@pytest.mark.parametrize(
    ("name", "nfe"),
    [("diffusers:HeunDiscreteScheduler", 7), ("diffusers:PNDMScheduler", 6)],
)
def test_steps_pass_through_the_states_at_the_grid(gmm, name, nfe):
    """One Step per grid interval, from the state at σ_i (not a predictor's trial point): the
    trajectory ends at the endpoint, and each step's denoised is D at its own state."""
    solver = build(gmm, name, nfe, "edm_to_zero")
    x = gmm.prior(noise_like(gmm, 4))
    with torch.no_grad():
        steps = list(solver.steps(gmm.denoise, x))
        endpoint = solver(gmm.denoise, x)
    assert [step.i for step in steps] == list(range(solver.num_steps))
    torch.testing.assert_close(steps[0].x, x)
    torch.testing.assert_close(steps[-1].x_next, endpoint)
    for step, following in itertools.pairwise(steps):
        torch.testing.assert_close(step.x_next, following.x)
    for step in steps:
        point = step.history[0]
        torch.testing.assert_close(
            point.denoised, gmm.denoise(step.x, point.sigma), atol=1e-5, rtol=0
        )


@pytest.mark.parametrize(
    ("name", "schedule", "settings", "match"),
    [
        ("HeunDiscreteScheduler", "edm", {}, "edm_to_zero"),
        ("KDPM2DiscreteScheduler", "logsnr", {}, "edm_to_zero"),
        ("DEISMultistepScheduler", "edm_to_zero", {}, "ends above it"),
        ("EulerDiscreteScheduler", "edm", {"use_karras_sigmas": True}, "own σ grid"),
        ("DDIMScheduler", "edm", {"timestep_spacing": "trailing"}, "own σ grid"),
        ("PNDMScheduler", "edm", {"skip_prk_steps": False}, "fixed to True"),
        ("SASolverScheduler", "edm", {"tau_func": None}, "fixed to"),
        ("DPMSolverMultistepScheduler", "edm", {"algorithm_type": "sde-dpmsolver++"}, "one of"),
        ("DPMSolverSinglestepScheduler", "edm_to_zero", {"algorithm_type": "dpmsolver"}, "says"),
        ("KDPM2DiscreteScheduler", "edm_to_zero", {"prediction_type": "sample"}, "says"),
        ("UniPCMultistepScheduler", "edm", {"prediction_type": "flow_prediction"}, "one of"),
        ("UniPCMultistepScheduler", "edm_to_zero", {"solver_type": "bh1"}, "NaN"),
    ],
)
def test_a_grid_the_scheduler_cannot_follow_is_refused(gmm, name, schedule, settings, match):
    nfe = 5
    with pytest.raises(SettingsError, match=match) as refused:
        build(gmm, f"diffusers:{name}", nfe, schedule, settings)
    assert "\n" not in str(refused.value)


def test_nfe_is_what_the_scheduler_spends(gmm):
    """Heun and KDPM2 spend 2N − 1, PNDM N + 1 (N = 1: once): NFEs they cannot reach are refused."""
    for name, steps, nfe in [
        ("HeunDiscreteScheduler", 4, 7),
        ("KDPM2DiscreteScheduler", 2, 3),
        ("PNDMScheduler", 4, 5),
        ("UniPCMultistepScheduler", 5, 5),
    ]:
        solver = build(gmm, f"diffusers:{name}", nfe, schedules(f"diffusers:{name}")[-1])
        assert solver.num_steps == steps
    with pytest.raises(UnreachableNFEError, match="can spend 1, 3, 5"):
        build(gmm, "diffusers:HeunDiscreteScheduler", 4, "edm_to_zero")
    with pytest.raises(UnreachableNFEError, match="can spend 1, 3, 4"):
        build(gmm, "diffusers:PNDMScheduler", 2)


def test_a_rollout_leaves_the_random_stream_and_the_dtype_as_it_found_them(gmm):
    """SA-Solver draws noise it multiplies by τ = 0; the caller's stream is not advanced. A
    bfloat16 state gets a bfloat16 endpoint."""
    solver = build(gmm, "diffusers:SASolverScheduler", 5)
    x = gmm.prior(noise_like(gmm, 2))
    before = torch.random.get_rng_state()
    with torch.no_grad():
        solver(gmm.denoise, x)
    assert torch.equal(torch.random.get_rng_state(), before)
    half = copy.deepcopy(gmm).to(torch.bfloat16)
    for name in SCHEDULERS:
        solver = build(gmm, name, 5, schedules(name)[0])
        with torch.no_grad():
            out = solver(half.denoise, x.to(torch.bfloat16))
        assert out.dtype == torch.bfloat16 and torch.isfinite(out).all(), name


@pytest.mark.parametrize("wrapper", ["spanlift", "ld3", "amed_plugin"])
def test_no_solver_is_built_around_a_scheduler(gmm, wrapper):
    settings = {"base": "diffusers:DDIMScheduler"}
    with pytest.raises(SettingsError, match="another library's loop"):
        build(gmm, wrapper, 4, "edm", settings)


def test_a_sweep_entry_names_a_scheduler_and_its_config():
    from spanlift.platform.sweep.config import SweepConfigError, parse_sweep
    from spanlift.platform.tracking.runs import run_name

    from .test_sweep_config import VALID

    data = copy.deepcopy(VALID)
    entry = {"name": "diffusers:DPMSolverMultistepScheduler", "nfe": [5]}
    data["solvers"].append({**entry, "settings": {"algorithm_type": "dpmsolver++"}})
    spec = parse_sweep(data).trials()[-1]
    assert spec.label() == "diffusers:DPMSolverMultistepScheduler[algorithm_type=dpmsolver++]"
    assert run_name(spec) == f"{spec.label()} nfe=5"
    data["solvers"][-1]["settings"] = {"use_karras_sigmas": True}
    with pytest.raises(SweepConfigError, match=r"solvers\[2\]\.settings.*own σ grid"):
        parse_sweep(data)


def test_solvers_lists_the_schedulers_with_their_config(capsys):
    from spanlift.cli import main

    assert main(["solvers"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in SCHEDULERS)
    assert "reference: huggingface/diffusers DPMSolverMultistepScheduler" in out
    assert "cites: Lu et al., 2022 (DPM-Solver++)" in out
    assert "algorithm_type='dpmsolver++'" in out and "use_karras_sigmas" not in out


def test_importing_the_solvers_imports_no_peer_library_and_a_missing_one_is_one_line(
    gmm, monkeypatch
):
    code = "import sys, spanlift.solvers; print(sorted({'diffusers', 'k_diffusion'} & set(sys.modules)))"
    printed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert printed.strip() == "[]"
    monkeypatch.setitem(sys.modules, "diffusers", None)  # as if not installed
    with pytest.raises(SettingsError, match=r"install spanlift's 'diffusers' extra") as missing:
        build(gmm, "diffusers:DDIMScheduler", 4)
    assert "\n" not in str(missing.value)


def test_every_schedule_grid_maps_onto_the_table_and_back():
    """The table built for a grid holds that grid (float32 ᾱ; the module docstring's bounds)."""
    from spanlift.solvers.diffusers_schedulers import betas_holding

    for schedule in ("edm", "logsnr", "time"):
        for steps in (2, 5, 10):
            grid = SCHEDULES.get(schedule)(steps, 0.002, 80.0)
            alphas = torch.cumprod(1 - torch.tensor(betas_holding(grid), dtype=torch.float32), 0)
            held = ((1 - alphas) / alphas).sqrt().double().flip(0)
            torch.testing.assert_close(held, grid, rtol=2.5e-3, atol=0)
