"""The memory settings of a fit (platform/fitting/memory.py): recomputation and micro-batches
leave the update as it was, autocast runs the networks in half precision, and what backward keeps
stops growing with NFE once calls are recomputed."""

import itertools
import random
import time
from dataclasses import replace

import pytest
import torch

from spanlift.backbones import load_backbone
from spanlift.errors import SettingsError
from spanlift.platform.doctor.device import first_buildable
from spanlift.platform.fitting import memory_plan as plan_module
from spanlift.platform.fitting import update_cost
from spanlift.platform.fitting.fit import FitSettings, fit, objective
from spanlift.platform.fitting.losses import mean_squared_error
from spanlift.platform.fitting.memory import MemoryPlan
from spanlift.platform.fitting.optimization import Optimization
from spanlift.platform.fitting.update_cost import MOST_FIXED_ROWS
from spanlift.platform.sampling.teacher import (
    SolverSpec,
    TeacherSet,
    generate_teacher,
    teacher_for,
)
from spanlift.platform.sampling.tensor_memory import MARGIN, device_peak, saved_for_backward
from spanlift.solvers import SOLVERS
from spanlift.solvers.loading import build

TEACHER = SolverSpec("heun", 9)


@pytest.fixture(scope="module")
def digits():
    return load_backbone("digits")


@pytest.fixture(scope="module")
def teacher(digits):
    return generate_teacher(digits, range(6), TEACHER, progress=False)


def learned_families(digits) -> list[SolverSpec]:
    """One spec per registered solver with trainable parameters, at its default settings."""
    specs = [first_buildable(name, {}) for name in SOLVERS.names()]
    return [
        spec
        for spec in specs
        if spec is not None and any(p.requires_grad for p in build(spec, digits).parameters())
    ]


def gradients(spec, digits, teacher, checkpoint: str) -> dict[str, torch.Tensor]:
    """The gradient of one batch's loss with respect to every trainable parameter."""
    solver = build(spec, digits)
    batch = teacher_for(solver, teacher, digits)
    settings = FitSettings(batch_size=len(batch), checkpoint=checkpoint)
    plan = MemoryPlan.of(checkpoint, "float32", 0, len(batch))
    with plan.blocks_of(digits.blocks):
        objective(solver, settings, digits, plan)(solver, batch, None).backward()
    return {n: p.grad.clone() for n, p in solver.named_parameters() if p.grad is not None}


def test_every_learned_family_has_the_plain_gradient_whatever_backward_recomputes(digits, teacher):
    families = learned_families(digits)
    names = {spec.name for spec in families}
    assert {"dyweight", "spanlift", "ld3", "amed", "epd", "s4s_alt", "dlms"} <= names
    for spec in families:
        plain = gradients(spec, digits, teacher, "none")
        assert plain, spec
        for checkpoint in ("calls", "blocks", "selective"):
            again = gradients(spec, digits, teacher, checkpoint)
            assert again.keys() == plain.keys(), (spec, checkpoint)
            for name, grad in plain.items():
                scale = grad.abs().max().clamp_min(1e-30)
                difference = (again[name] - grad).abs().max() / scale
                assert difference <= 1e-6, (spec.label(), checkpoint, name, float(difference))


def kept_bytes(spec, digits, teacher, checkpoint: str) -> int:
    solver = build(spec, digits)
    settings = FitSettings(batch_size=len(teacher), checkpoint=checkpoint)
    loss = objective(solver, settings, digits)
    weights = [*digits.parameters(), *solver.parameters()]
    with saved_for_backward(weights) as kept:
        loss(solver, teacher, None)
    return kept["bytes"]


def test_recomputed_calls_keep_a_state_per_step_not_a_calls_activations(digits, teacher):
    """From NFE 3 to NFE 6 a plain fit keeps three more calls' activations per sample; with
    calls recomputed, three more steps of the solver's own state only."""
    sample = 4 * digits.shape[0] * digits.shape[1] * digits.shape[2] * len(teacher)
    growth = {}
    for checkpoint in ("none", "calls"):
        low, high = (
            kept_bytes(SolverSpec("dyweight", nfe), digits, teacher, checkpoint) for nfe in (3, 6)
        )
        growth[checkpoint] = high - low
    assert growth["none"] > 20 * growth["calls"]
    assert growth["calls"] <= 3 * 8 * sample  # a handful of state-sized tensors per step


def test_selective_recomputation_keeps_the_expensive_outputs_only(digits, teacher):
    """Selective recomputation keeps the convolutions' and matmuls' outputs: less than the plain
    fit keeps, more than a call's inputs alone."""
    spec = SolverSpec("dyweight", 5)
    kept = {c: kept_bytes(spec, digits, teacher, c) for c in ("none", "selective", "calls")}
    assert kept["calls"] < kept["selective"] < 0.6 * kept["none"], kept


def fitted(digits, teacher, **settings) -> torch.nn.Module:
    solver = build(SolverSpec("spanlift", 3, settings={"base": "ipndm"}), digits, seed=1)
    base = FitSettings(iterations=3, batch_size=6, validation=0, lr=1e-2, warmup=0)
    fit(solver, digits, teacher, replace(base, **settings), progress=False)
    return solver


def accumulated_gradients(digits, teacher, micro_batch, monkeypatch) -> tuple[float, list]:
    """One update's loss and gradients, as the optimizer would receive them."""
    solver = build(SolverSpec("spanlift", 3, settings={"base": "ipndm"}), digits, seed=1)
    settings = FitSettings(batch_size=6, micro_batch=micro_batch)
    plan = MemoryPlan.of("none", "float32", micro_batch, 6)
    params = [p for p in solver.parameters() if p.requires_grad]
    steps = Optimization.set_up(solver, params, teacher, settings, plan)
    seen = []
    monkeypatch.setattr(steps, "update", lambda *a: seen.extend(p.grad.clone() for p in params))
    value = steps.step(solver, solver, objective(solver, settings, digits), teacher, 0, settings)
    return value, seen


def test_micro_batches_give_the_update_of_one_batch(digits, teacher, monkeypatch):
    value, grads = accumulated_gradients(digits, teacher, 0, monkeypatch)
    for micro in (1, 4):  # equal passes, and 4 + 2
        split_value, split = accumulated_gradients(digits, teacher, micro, monkeypatch)
        assert split_value == pytest.approx(value, rel=1e-6)
        for a, b in zip(grads, split, strict=True):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=2e-5 * a.abs().max().item())


def test_a_recomputed_fit_ends_where_the_plain_fit_ends(digits, teacher):
    one = fitted(digits, teacher)
    for checkpoint in ("calls", "blocks"):
        again = fitted(digits, teacher, checkpoint=checkpoint)
        for a, b in zip(one.state_dict().values(), again.state_dict().values(), strict=True):
            torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_a_half_precision_fit_runs_on_the_cpu_with_the_backbone_in_that_precision(
    digits, teacher, precision
):
    seen = set()
    hook = digits.model.net.stem.register_forward_hook(lambda m, i, out: seen.add(out.dtype))
    try:
        solver = fitted(digits, teacher, precision=precision)
    finally:
        hook.remove()
    assert seen == {getattr(torch, precision)}
    plain = fitted(digits, teacher)
    for name, p in solver.named_parameters():
        assert p.dtype == torch.float32 and torch.isfinite(p).all(), name
    changed = [
        not torch.equal(a, b) for a, b in zip(solver.parameters(), plain.parameters(), strict=True)
    ]
    assert any(changed)  # the networks really ran in another precision


def test_blocks_on_a_backbone_without_blocks_is_one_line(teacher):
    gmm = load_backbone("gmm")
    gmm_teacher = generate_teacher(gmm, range(4), TEACHER, progress=False)
    solver = build(SolverSpec("dyweight", 3), gmm)
    with pytest.raises(SettingsError, match="no blocks to recompute"):
        fit(solver, gmm, gmm_teacher, FitSettings(iterations=1, checkpoint="blocks"))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"checkpoint": "layers"},
            "checkpoint must be one of none, calls, blocks, selective, auto",
        ),
        ({"precision": "fp8"}, "precision must be one of float32, bfloat16, float16"),
        ({"micro_batch": -1}, "micro_batch must be a non-negative integer"),
    ],
)
def test_memory_settings_outside_what_they_take_are_one_line(changes, message):
    with pytest.raises(SettingsError, match=message):
        FitSettings(**changes)


def test_the_adversarial_loss_is_not_split_into_passes(digits, teacher):
    solver = build(SolverSpec("dyweight", 3), digits)
    settings = FitSettings(iterations=1, batch_size=6, micro_batch=2, loss="adversarial")
    with pytest.raises(SettingsError, match="trains its own network once per backward pass"):
        fit(solver, digits, teacher, settings, progress=False)


def test_memory_settings_stay_out_of_a_fits_identity_but_precision_does_not():
    plain = FitSettings()
    assert plain.to_dict() == FitSettings(checkpoint="none", micro_batch=0).to_dict()
    assert FitSettings(checkpoint="calls", micro_batch=4).identity() == plain.identity()
    assert FitSettings(precision="bfloat16").identity() != plain.identity()
    assert FitSettings(checkpoint="calls").to_dict()["checkpoint"] == "calls"  # travels


def auto_fit(digits, teacher, monkeypatch, free: int, fixed_rows: int) -> dict:
    """The memory record of an auto fit on a device with `free` bytes whose backbone calls cost
    `fixed_rows` rows whatever their rows (`update_cost.py`), its memory as measured."""
    measure = plan_module.probe_fit

    def timed_as_told(*args):
        probe = measure(*args)
        return replace(probe, backbone=replace(probe.backbone, fixed_rows=fixed_rows))

    monkeypatch.setattr(plan_module, "probe_fit", timed_as_told)
    monkeypatch.setattr(plan_module, "free_bytes", lambda device: free)
    settings = FitSettings(iterations=2, batch_size=6, validation=0, checkpoint="auto")
    solver = build(SolverSpec("dyweight", 5), digits)
    return fit(solver, digits, teacher, settings, progress=False).memory


def test_auto_keeps_everything_when_it_fits_and_else_recomputes_or_splits_by_cost(
    digits, teacher, monkeypatch
):
    """Plenty of memory: one plain pass. Room for recomputed calls on the whole batch but not
    for a plain pass: on a device whose calls cost a fixed time (a GPU at small batches) auto
    recomputes; where a call's time is per row (a CPU) it splits the batch instead. The
    prediction is recorded, and the first update's measured peak lies within 15 % of it."""
    solver = build(SolverSpec("dyweight", 5), digits)
    probe = plan_module.probe_fit(solver, digits, teacher, "float32", mean_squared_error)
    assert probe.peak("none", 6) > probe.peak("calls", 6)
    roomy = auto_fit(digits, teacher, monkeypatch, 2**40, MOST_FIXED_ROWS)
    assert (roomy["fit.memory.checkpoint"], roomy["fit.memory.micro_batch"]) == ("none", 0)
    tight = int(probe.peak("calls", 6) / (1 - plan_module.MARGIN)) + 1
    fixed_cost = auto_fit(digits, teacher, monkeypatch, tight, MOST_FIXED_ROWS)
    assert (fixed_cost["fit.memory.checkpoint"], fixed_cost["fit.memory.micro_batch"]) == (
        "calls",
        0,
    )
    per_row = auto_fit(digits, teacher, monkeypatch, tight, 0)
    assert per_row["fit.memory.checkpoint"] == "none"
    assert 0 < per_row["fit.memory.micro_batch"] < 6
    for memory in (roomy, fixed_cost, per_row):
        assert memory["fit.memory.chosen_by"] == "auto"
        predicted = memory["fit.memory.predicted_peak_mib"]
        measured = memory["fit.memory.measured_peak_mib"]
        assert abs(measured - predicted) <= 0.15 * measured, memory


def clock(steps: list[float]):
    """A `time.perf_counter` whose readings advance by `steps` in turn, cyclically."""
    readings = itertools.accumulate(itertools.cycle(steps))
    return lambda: next(readings)


def test_auto_names_the_same_settings_whatever_the_timings_noise(digits, teacher, monkeypatch):
    """Room for recomputed calls on the whole batch, and for the plain fit in passes: the same
    probe names one setting whether a loaded machine's clock read a call of two rows as long as
    one of one row, or twice as long."""
    solver = build(SolverSpec("dyweight", 5), digits)
    probe = plan_module.probe_fit(solver, digits, teacher, "float32", mean_squared_error)
    tight = int(probe.peak("calls", 6) / (1 - MARGIN)) + 1
    monkeypatch.setattr(plan_module, "free_bytes", lambda device: tight)
    settings = FitSettings(batch_size=6, checkpoint="auto")
    named = set()
    for steps in ([1.0], [1.0, 1.0, 1.0, 2.0], [0.5, 3.0]):
        monkeypatch.setattr(time, "perf_counter", clock(steps))
        plan = plan_module.memory_plan(solver, digits, teacher, settings, mean_squared_error)
        named.add((plan.checkpoint, plan.micro_batch))
    assert len(named) == 1, named


def noisy_timing(seed: int):
    """`update_cost.timed` of a call of n rows that takes 8 + n: off by up to 3 %, and the
    (seed mod 5)-th of every five timings three times too slow."""
    generator, count = random.Random(seed), [0]

    def timing(device, run) -> float:
        rows, count[0] = run(), count[0] + 1
        slow = 3.0 if count[0] % update_cost.REPEATS == seed % update_cost.REPEATS else 1.0
        return (8 + rows) * slow * generator.uniform(0.97, 1.03)

    return timing


def test_a_gpu_calls_fixed_rows_stay_put_under_timing_noise(monkeypatch):
    """A call of n rows taking 8 + n ms (fixed time: 8 rows), each timing off by up to 3 % and
    one of every five three times too slow: 8 rows, whatever the draw."""
    for seed in range(20):
        monkeypatch.setattr(update_cost, "timed", noisy_timing(seed))
        assert update_cost.fixed_rows(torch.device("cuda"), lambda rows: rows) == 8, seed


def measured_update(backbone, teacher, solver, checkpoint: str, precision: str) -> int:
    """Peak bytes of one update on the whole teacher set (the fit's first, optimizer state
    included), as `Optimization.measured_step` records it."""
    settings = FitSettings(batch_size=len(teacher), checkpoint=checkpoint, precision=precision)
    plan = MemoryPlan.of(checkpoint, precision, 0, len(teacher))
    params = [p for p in solver.parameters() if p.requires_grad]
    steps = Optimization.set_up(solver, params, teacher, settings, plan)
    loss = objective(solver, settings, backbone, plan)

    def update() -> None:
        with plan.blocks_of(backbone.blocks):
            steps.step(solver, solver, loss, teacher, 0, settings)

    return device_peak(torch.device("cpu"), update)


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
@pytest.mark.parametrize("checkpoint", ["none", "calls"])
def test_the_predicted_peak_of_a_batch_is_within_15_percent_in_either_precision(
    digits, teacher, precision, checkpoint
):
    """Under autocast every call keeps a half-precision copy of the float32 weights its ops
    saved, once per call whatever its batch: counted per sample, the prediction for 6 samples
    was twice the measured peak."""
    solver = build(SolverSpec("dyweight", 5), digits)
    probe = plan_module.probe_fit(solver, digits, teacher, precision, mean_squared_error)
    measured = measured_update(digits, teacher, solver, checkpoint, precision)
    predicted = probe.peak(checkpoint, len(teacher))
    assert abs(predicted - measured) <= 0.15 * measured, (predicted, measured)
    if precision != "float32":
        assert probe.backbone.call.fixed > 0  # the copies, counted once per call


@pytest.mark.parametrize("checkpoint", ["none", "calls", "blocks", "selective"])
def test_the_predicted_peak_of_a_fit_whose_solver_keeps_much_is_within_15_percent(
    digits, checkpoint
):
    """SpanLift's operator keeps more per step than a backbone call's peak: counted as live
    beside the recomputed call's peak, the whole rollout's peak over-predicted a fit with calls
    recomputed; in backward a call is computed again when only what the rollout kept before it
    is still held."""
    noise = torch.randn(16, *digits.shape, generator=torch.Generator().manual_seed(0))
    batch = TeacherSet(torch.arange(16), noise, 0.5 * noise)
    solver = build(SolverSpec("spanlift", 5, settings={"base": "dyweight"}), digits)
    probe = plan_module.probe_fit(solver, digits, batch, "float32", mean_squared_error)
    measured = measured_update(digits, batch, solver, checkpoint, "float32")
    predicted = probe.peak(checkpoint, len(batch))
    assert abs(predicted - measured) <= 0.15 * measured, (predicted, measured)
