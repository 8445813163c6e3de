"""overhead, a solver metric added as one file (`evaluation/metrics/overhead.py`): its parameter
and FLOP counts against hand counts from the layers' shapes (a one-convolution backbone, SpanLift's
residual operator as `solvers/operators.py` describes it), and what reads the metric registry
finding it: the catalogue, the sweep schema, `spanlift eval`."""

from pathlib import Path

import pytest
from torch import Tensor, nn

from spanlift.backbones import Backbone, load_backbone
from spanlift.cli import main
from spanlift.platform.evaluation.metrics.overhead import Overhead
from spanlift.platform.sweep.config import parse_sweep
from spanlift.platform.tracking.metrics import default_mode, produced_by
from spanlift.solvers import SolverSpec
from spanlift.solvers.loading import build

C, HW, KERNEL = 3, 6, 3


class OneConvolution(Backbone):
    """D(x, σ) = conv(x): 2·C·C·k²·H·W FLOPs a call, C·C·k² + C parameters."""

    shape = (C, HW, HW)
    sigma_min, sigma_max = 0.002, 80.0

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(C, C, KERNEL, padding=KERNEL // 2)

    def denoise(self, x: Tensor, sigma: Tensor, cond=None) -> Tensor:
        return self.conv(x)

    def identity(self) -> str:
        return "one-convolution"


def measured(spec: SolverSpec, backbone: Backbone, tmp_path: Path) -> dict[str, float]:
    solver = build(spec, backbone)
    return Overhead().of_solver(solver, backbone, tmp_path, spec.name).metrics


def test_an_element_wise_solver_costs_its_backbone_calls_alone(tmp_path: Path) -> None:
    backbone = OneConvolution()
    call = 2 * C * C * KERNEL**2 * HW * HW
    for spec, calls in ((SolverSpec("euler", 4), 4), (SolverSpec("heun", 5), 5)):
        metrics = measured(spec, backbone, tmp_path)
        assert metrics["overhead.gflops"] == pytest.approx(calls * call / 1e9, rel=1e-12)
        assert metrics["overhead.solver_mflops"] == 0
        assert metrics["overhead.solver_params"] == 0
        assert metrics["overhead.params_m"] == pytest.approx((C * C * KERNEL**2 + C) / 1e6)


def operator_flops(channels: int, pixels: int, history: int, d: int, k: int, blocks: int) -> int:
    """One step of the spatial operator on one image: the 1×1 stem on C(1+K) channels, per block
    a depthwise k×k and a 1×1 convolution on d channels, the 1×1 head; the FiLM MLP on ξ (3 → d
    → 2·d·blocks)."""
    stem = channels * (1 + history) * d * pixels
    block = (d * k * k + d * d) * pixels
    head = d * channels * pixels
    film = 3 * d + d * 2 * d * blocks
    return 2 * (stem + blocks * block + head + film)


def operator_params(channels: int, history: int, d: int, k: int, blocks: int, steps: int) -> int:
    """The spatial operator's weights and biases (GroupNorm: a scale and shift per channel), and
    SpanLift's α_i, β_i per step."""
    stem = channels * (1 + history) * d + d
    film = 3 * d + d + d * 2 * d * blocks + 2 * d * blocks
    block = 2 * d + d * k * k + d + d * d + d
    head = d * channels + channels
    return stem + film + blocks * block + head + 2 * steps


@pytest.mark.parametrize(("hidden", "kernel"), [(64, 3), (16, 5)])
def test_spanlift_adds_its_operator_to_its_base(tmp_path: Path, hidden: int, kernel: int) -> None:
    backbone = load_backbone("digits")
    settings = {"hidden_dim": hidden, "kernel_size": kernel}
    spanlift = measured(SolverSpec("spanlift", 4, settings=settings), backbone, tmp_path)
    base = measured(SolverSpec("dyweight", 4), backbone, tmp_path)
    channels, height, width = backbone.shape
    steps = build(SolverSpec("spanlift", 4), backbone).num_steps
    per_step = operator_flops(channels, height * width, 3, hidden, kernel, 2)
    assert spanlift["overhead.solver_mflops"] == pytest.approx(steps * per_step / 1e6, rel=1e-12)
    assert spanlift["overhead.gflops"] == pytest.approx(
        base["overhead.gflops"] + steps * per_step / 1e9, rel=1e-12
    )
    added = operator_params(channels, 3, hidden, kernel, 2, steps)
    assert spanlift["overhead.solver_params"] == base["overhead.solver_params"] + added
    assert spanlift["overhead.params_m"] == pytest.approx(base["overhead.params_m"] + added / 1e6)


def test_the_catalogue_the_sweep_schema_and_eval_read_it_from_the_registry(capsys) -> None:
    assert default_mode("overhead.gflops") == "min"
    assert "overhead.solver_params" in produced_by(("overhead",))
    sweep = {
        "experiment": "overhead",
        "backbone": "gmm",
        "solvers": [{"name": "euler", "nfe": 3}],
        "evaluation": {"metrics": ["overhead"]},
    }
    assert parse_sweep(sweep).evaluation.metrics == ("overhead",)
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    assert "overhead" in capsys.readouterr().out
