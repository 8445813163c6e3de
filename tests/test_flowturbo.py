"""FlowTurbo against its authors' modules (shiml20/FlowTurbo models_assemble.py; fixture
tests/fixtures/flowturbo_reference.json): the refiner, each kind of step and a short loop on the
Gaussian mixture, seeded refiner weights and the refiner their training starts from."""

import json
from pathlib import Path

import pytest
import torch

from spanlift.errors import SettingsError, UnreachableNFEError
from spanlift.solvers import SOLVERS, NFECounter, SolverSpec, build_solver
from spanlift.solvers.velocity_refiner import position_table

from .conftest import stored_mixture

REFERENCE = json.loads(
    (Path(__file__).parent / "fixtures" / "flowturbo_reference.json").read_text()
)
SETTINGS = {"hidden_dim": 32, "heads": 4, "blocks": 1, "patch_size": 2}
RENAMED = {  # their parameter name → spanlift's
    "x_embedder.proj": "embed",
    "t_embedder.mlp": "time",
    "blocks.0.attn.qkv": "blocks.0.attention.qkv",
    "blocks.0.attn.proj": "blocks.0.attention.out",
    "blocks.0.mlp.fc1": "blocks.0.mlp.0",
    "blocks.0.mlp.fc2": "blocks.0.mlp.2",
    "blocks.0.adaLN_modulation.1": "blocks.0.modulation",
    "final_layer.adaLN_modulation.1": "final_modulation",
    "final_layer.linear": "final",
}


def tensor(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def their_weights() -> dict[str, torch.Tensor]:
    """The seeded weights the driver gave their refiner, drawn again in its order."""
    spec = REFERENCE["weights"]
    generator = torch.Generator().manual_seed(spec["seed"])
    return {
        name: torch.randn(shape, generator=generator) * spec["scale"]
        for name, shape in spec["order"]
    }


def spanlift_state(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Their refiner's weights under spanlift's names: the null class's label row, and of their
    output layer (2C channels, `learn_sigma`) the rows of the first C, which they keep."""
    state = {}
    for name, value in weights.items():
        if name == "y_embedder.embedding_table.weight":
            state["label"] = value[REFERENCE["refiner"]["num_classes"]]
            continue
        if name.startswith("final_layer.linear"):  # rows in (p, q, channel), 2C channels
            p = REFERENCE["refiner"]["patch_size"]
            value = value.unflatten(0, (p, p, 2, -1))[:, :, 0].flatten(0, 2)
        theirs = next((prefix for prefix in RENAMED if name.startswith(prefix + ".")), "")
        state[name.replace(theirs, RENAMED[theirs], 1) if theirs else name] = value
    return state


def solver(refiner_steps: int = 2, trained: bool = True):
    """FlowTurbo on the driver's grid σ_i = (1 − t_i)/t_i, with their seeded refiner."""
    t = torch.tensor(REFERENCE["t"], dtype=torch.float64)
    built = SOLVERS.get("flowturbo")((1 - t) / t, refiner_steps=refiner_steps, **SETTINGS)
    if trained:
        built.refiner.load_state_dict(spanlift_state(their_weights()))
    return built.eval()


def mixture_denoiser():
    mixture = stored_mixture(REFERENCE["mixture"])
    return lambda x, sigma: mixture.denoise(x.double(), sigma.double()).float()


def test_the_refiner_equals_theirs():
    flowturbo = solver()
    torch.testing.assert_close(
        position_table(32, 4, 4), tensor(REFERENCE["pos_embed"]), rtol=0, atol=1e-7
    )
    with torch.no_grad():
        out = flowturbo.refiner(
            tensor(REFERENCE["x_mid"]), tensor(REFERENCE["u"]), tensor(REFERENCE["refiner_time"])
        )
    torch.testing.assert_close(out, tensor(REFERENCE["refiner_output"]), rtol=0, atol=2e-6)


@pytest.mark.parametrize("kind", ["heun_step", "pseudo_step", "refiner_step"])
def test_each_step_equals_theirs(kind):
    """One step from x_mid at t_i in their coordinates (x_t, v): the state after it, the velocity
    it carries on, and the backbone calls it spent."""
    entry, flowturbo = REFERENCE[kind], solver()
    x_t, u, i = tensor(REFERENCE["x_mid"]), tensor(REFERENCE["u"]), entry["i"]
    counter = NFECounter(mixture_denoiser())
    with torch.no_grad():
        if kind == "refiner_step":
            x_next, carry = flowturbo.refiner_step(i, x_t, u)
        else:
            v = flowturbo.velocity(counter, x_t, i)[0] if kind == "heun_step" else u
            x_next, carry = flowturbo.heun_step(i, x_t, v, counter)
    torch.testing.assert_close(x_next, tensor(entry["x_next"]), rtol=0, atol=2e-6)
    torch.testing.assert_close(carry, tensor(entry["carry"]), rtol=0, atol=2e-6)
    assert counter.calls == entry.get("backbone_calls", 0)


@pytest.mark.parametrize("run", ["loop", "untrained_loop"])
def test_the_loop_equals_theirs(run):
    """Their FlowTurboAssemble.forward (N_H 1, N_P 2, N_R 2) from z, with the seeded refiner and
    with the refiner their training starts from (zero correction), which an untrained FlowTurbo
    is: there the refiner steps are Euler steps with the last backbone velocity."""
    flowturbo = solver(trained=run == "loop")
    sigmas = flowturbo.sigmas
    counter = NFECounter(mixture_denoiser())
    with torch.no_grad():
        endpoint = flowturbo(counter, tensor(REFERENCE["z"]) * (1 + sigmas[0]).float())
    x_t = endpoint / (1 + sigmas[-1]).float()
    torch.testing.assert_close(x_t, tensor(REFERENCE[run]["x_final"]), rtol=0, atol=1e-5)
    assert counter.calls == REFERENCE[run]["backbone_calls"] == flowturbo.nfe == 4
    assert (flowturbo.pseudo_steps, flowturbo.heun_steps) == (2, 1)


@pytest.mark.parametrize(
    ("nfe", "settings", "steps"),
    [(3, {}, 5), (2, {"refiner_steps": 7}, 8), (3, {"heun_steps": 0, "refiner_steps": 1}, 3)],
)
def test_nfe_counts_backbone_calls_only(gmm, nfe, settings, steps):
    """2 N_H + N_P (+ 1 without Heun steps); refiner steps are free, however many."""
    small = {"hidden_dim": 8, "heads": 2, **settings}
    built = build_solver(SolverSpec("flowturbo", nfe, "edm", small), 0.002, 80.0, 1)
    counter = NFECounter(gmm.denoise)
    with torch.no_grad():
        built(counter, torch.randn(2, 1, 8, 8) * 80)
    assert (built.num_steps, built.nfe, counter.calls) == (steps, nfe, nfe)


@pytest.mark.parametrize(
    ("nfe", "schedule", "settings", "message"),
    [
        (3, "edm", {"heun_steps": -1}, "heun_steps must be an integer"),
        (3, "edm", {"hidden_dim": 30}, "multiple of 4"),
        (3, "edm_to_zero", {"refiner_steps": 0}, "no velocity"),
    ],
)
def test_bad_settings_are_one_line(nfe, schedule, settings, message):
    with pytest.raises(SettingsError, match=message) as refused:
        build_solver(SolverSpec("flowturbo", nfe, schedule, settings), 0.002, 80.0, 1)
    assert len(str(refused.value).splitlines()) == 1


def test_one_evaluation_is_unreachable():
    with pytest.raises(UnreachableNFEError, match="cannot spend exactly nfe=1"):
        build_solver(SolverSpec("flowturbo", 1), 0.002, 80.0, 1)
