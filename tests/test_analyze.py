"""`spanlift analyze`: the Halvorsen decomposition against an independent RK4, the chord ratio
against NumPy, the out-of-span ratio of scalar-coefficient solvers (zero) and SpanLift, and the
command (PNG, CSV, one MLflow run; bad inputs exit 2 with one line)."""

import numpy as np
import pandas as pd
import pytest
import torch
from mlflow.tracking import MlflowClient

from spanlift.cli import main
from spanlift.platform.analysis.chord_ratio import chord_ratio, project_out
from spanlift.platform.analysis.halvorsen import (
    HalvorsenSetup,
    decompose,
    halvorsen_analysis,
)
from spanlift.platform.analysis.out_of_span import update_out_of_span
from spanlift.platform.evaluation.metrics.diagnostics import spanlift_diagnostics
from spanlift.platform.sampling.rollout import seed_noise
from spanlift.solvers import SolverSpec, build_solver, save_solver

# ---------------------------------------------------------------- Halvorsen


@pytest.fixture(scope="module")
def halvorsen():
    return halvorsen_analysis(HalvorsenSetup())


def rk4(x: np.ndarray, duration: float, steps: int, a: float = 1.89) -> np.ndarray:
    """Classical RK4 with `steps` equal steps, on a velocity written out here again."""

    def f(s: np.ndarray) -> np.ndarray:
        x_, y, z = s
        return np.array(
            [
                -a * x_ - 4 * y - 4 * z - y * y,
                -a * y - 4 * z - 4 * x_ - z * z,
                -a * z - 4 * x_ - 4 * y - x_ * x_,
            ]
        )

    h = duration / steps
    for _ in range(steps):
        k1 = f(x)
        k2 = f(x + h / 2 * k1)
        k3 = f(x + h / 2 * k2)
        k4 = f(x + h * k3)
        x = x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return x


def test_exact_step_agrees_with_fine_rk4(halvorsen) -> None:
    setup, ref = halvorsen.setup, halvorsen.reference
    x_i = rk4(np.array(setup.initial), setup.t_i, 18_000)
    assert np.abs(x_i - ref.x[0]).max() < 1e-8
    endpoint = rk4(ref.x[0], setup.h, 2_000)
    assert np.abs(endpoint - halvorsen.endpoint).max() < 1e-10
    target = (endpoint - ref.x[0]) / setup.h
    assert np.abs(target - ref.target[0]).max() < 1e-9


def test_decomposition_adds_up(halvorsen) -> None:
    for row in halvorsen.rows.values():
        total = row.in_span_mismatch + row.out_of_span_residual
        assert row.mismatch == pytest.approx(total, rel=1e-9, abs=1e-12)


def test_scalar_updates_stay_in_the_span_and_sit_on_the_floor(halvorsen) -> None:
    floor = halvorsen.floor
    assert floor > 1.0  # the step is coarse: a real part of Δ* lies outside V_i
    for name in ("AB2", "DyWeight-like", "best in-span"):
        row, update = halvorsen.rows[name], halvorsen.updates[name]
        assert row.update_out_of_span < 1e-20 * (update @ update) + 1e-24
        assert row.out_of_span_residual == pytest.approx(floor, rel=1e-9)
        assert row.mismatch >= floor * (1 - 1e-12)
    assert halvorsen.rows["best in-span"].in_span_mismatch < 1e-20


def test_learned_residual_goes_below_the_in_span_floor(halvorsen) -> None:
    assert halvorsen.train_distance > 0  # x_i is not a training state
    assert halvorsen.rows["SpanLift-like"].mismatch < halvorsen.floor
    assert halvorsen.rows["SpanLift-like"].update_out_of_span > 0
    held = halvorsen.held_out
    assert held["SpanLift-like"] < halvorsen.held_out_floor
    assert held["DyWeight-like"] < held["AB2"]  # what its shared weights were fitted for


def test_decompose_is_pythagoras_for_any_vectors() -> None:
    rng = np.random.default_rng(3)
    target, update, basis = rng.normal(size=3), rng.normal(size=3), rng.normal(size=(3, 2))
    parts = decompose(target, update, basis)
    normal = np.cross(basis[:, 0], basis[:, 1])
    outside = (target - update) @ normal / np.linalg.norm(normal)
    assert parts.out_of_span_residual == pytest.approx(outside**2, rel=1e-12)
    assert parts.mismatch == pytest.approx(((target - update) ** 2).sum(), rel=1e-12)


# ---------------------------------------------------------------- chord ratio


def test_project_out_matches_numpy_least_squares() -> None:
    g = torch.Generator().manual_seed(0)
    v, c = torch.randn(3, 2, 4, 4, generator=g), torch.randn(3, 2, 4, 4, generator=g)
    ours = project_out(v, c).numpy()
    for n in range(3):
        chord, vector = c[n].double().flatten().numpy(), v[n].double().flatten().numpy()
        along = np.linalg.lstsq(chord[:, None], vector, rcond=None)[0]
        np.testing.assert_allclose(ours[n], vector - chord * along, atol=1e-12)
    assert project_out(c, c).abs().max() < 1e-12


def random_spanlift(backbone, base: str, operator: str = "spatial", nfe: int = 4, seed: int = 0):
    """A SpanLift whose operator has its random initial weights and β = 0.5 at every step."""
    torch.manual_seed(seed)
    spec = SolverSpec(
        "spanlift", nfe, settings={"base": base, "operator": operator, "beta_init": 0.5}
    )
    return build_solver(spec, backbone.sigma_min, backbone.sigma_max, backbone.shape[0])


def test_chord_ratio_equals_numpy_on_a_small_case(gmm64) -> None:
    solver = random_spanlift(gmm64, "ipndm").double()
    with torch.no_grad():
        solver.alpha.copy_(torch.tensor([1.0, 0.9, 1.2, 0.8]))
    noise = seed_noise(range(5), gmm64.shape).double()
    endpoints = torch.randn(5, *gmm64.shape, generator=torch.Generator().manual_seed(9)).double()
    ours = chord_ratio(solver, gmm64, noise, endpoints, batch_size=3)  # batches of 3 and 2

    x0 = gmm64.prior(noise)
    chords = (endpoints - x0).flatten(1).numpy()
    expected = []
    with torch.no_grad():
        for step in solver.steps(gmm64.denoise, x0):
            base, op = solver.parts(step.i, step.x, step.history, gmm64.denoise)
            scaled_base = (solver.alpha[step.i] * base).flatten(1).numpy()
            scaled_op = (solver.beta[step.i] * op).flatten(1).numpy()
            ratios = []
            for c, b, o in zip(chords, scaled_base, scaled_op, strict=True):
                unit = c / np.linalg.norm(c)
                off_o, off_b = o - unit * (o @ unit), b - unit * (b @ unit)
                ratios.append(np.linalg.norm(off_o) / np.linalg.norm(off_b))
            expected.append(np.mean(ratios))
    assert ours["step"].tolist() == [0, 1, 2, 3]
    np.testing.assert_allclose(ours["ratio"], expected, rtol=1e-9)
    assert (ours["ratio"] > 0).all()


def test_chord_ratio_scales_with_beta(gmm) -> None:
    noise = seed_noise(range(8), gmm.shape)
    solver = random_spanlift(gmm, "euler")
    endpoints = torch.zeros(8, *gmm.shape)
    half = chord_ratio(solver, gmm, noise, endpoints)["ratio"]
    with torch.no_grad():
        solver.beta.fill_(0.0)
    assert (chord_ratio(solver, gmm, noise, endpoints)["ratio"] == 0).all()
    assert (half > 0).all()


# ---------------------------------------------------------------- out-of-span


@pytest.mark.parametrize(
    ("name", "settings"), [("dyweight", {"order": 3}), ("ipndm", {"order": 3}), ("euler", {})]
)
def test_scalar_coefficient_solvers_stay_in_the_span(gmm, name, settings) -> None:
    solver = build_solver(SolverSpec(name, 5, settings=settings), gmm.sigma_min, gmm.sigma_max, 1)
    if name == "dyweight":  # learned weights, not iPNDM's: still a scalar combination
        with torch.no_grad():
            solver.weights.add_(0.3 * torch.randn(solver.weights.shape))
    ratios = update_out_of_span(solver, gmm, seed_noise(range(16), gmm.shape))["ratio"]
    assert len(ratios) == 5 and ratios.max() < 1e-5


def test_heun_evaluates_off_the_buffer_and_leaves_the_span(gmm) -> None:
    heun = build_solver(SolverSpec("heun", 5), gmm.sigma_min, gmm.sigma_max, 1)
    ratios = update_out_of_span(heun, gmm, seed_noise(range(16), gmm.shape))["ratio"]
    assert ratios[1] > 1e-2  # (d_i + d(x', σ_{i+1}))/2: d(x', ·) is no buffered derivative
    assert ratios.iloc[-1] < 1e-5  # its last step is Euler


def test_spanlift_correction_leaves_the_span(gmm) -> None:
    noise = seed_noise(range(16), gmm.shape)
    solver = random_spanlift(gmm, "dyweight")
    ratios = update_out_of_span(solver, gmm, noise)["ratio"]
    assert ratios[0] > 0.5  # V_0 is the single direction d_0
    assert (ratios > 1e-3).all()
    # the measured vector is Δop (not the whole update): the SpanLift diagnostics' ρ
    diagnostics = [s.out_of_span for s in spanlift_diagnostics(solver, gmm, noise)]
    np.testing.assert_allclose(ratios, diagnostics, rtol=1e-9)
    scalar = random_spanlift(gmm, "dyweight", operator="scalar")
    assert update_out_of_span(scalar, gmm, noise)["ratio"].max() < 1e-5


# ---------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """One sqlite store for the module (creating its tables takes seconds)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow')}/mlflow.db"


@pytest.fixture(scope="module")
def checkpoints(gmm, tmp_path_factory):
    folder = tmp_path_factory.mktemp("checkpoints")
    paths = {}
    for base in ("ipndm", "euler"):
        paths[base] = save_solver(folder / f"spanlift-{base}.pt", random_spanlift(gmm, base))
    dyweight = build_solver(SolverSpec("dyweight", 4), gmm.sigma_min, gmm.sigma_max, 1)
    paths["dyweight"] = save_solver(folder / "dyweight.pt", dyweight)
    (folder / "notes.pt").write_text("not a checkpoint")
    torch.save({"weights": torch.zeros(2)}, folder / "foreign.pt")
    paths["garbage"], paths["foreign"] = folder / "notes.pt", folder / "foreign.pt"
    return paths


def analyze(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["analyze", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def runs_of(store: str, analysis: str) -> list:
    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("analyze")
    runs = client.search_runs(
        [experiment.experiment_id], f"tags.`spanlift.analysis` = '{analysis}'"
    )
    return [(run, [a.path for a in client.list_artifacts(run.info.run_id)]) for run in runs]


def written(folder, name: str) -> pd.DataFrame:
    assert (folder / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    return pd.read_csv(folder / f"{name}.csv")


def test_halvorsen_command(capsys, tmp_path, store) -> None:
    out_dir = tmp_path / "halvorsen"
    argv = ["--train-states", "400", "--held-out-states", "32", "--out", str(out_dir)]
    code, out, _ = analyze(capsys, "halvorsen", *argv, "--tracking-uri", store)
    assert code == 0
    table = written(out_dir, "halvorsen")
    assert table["update"].tolist() == ["AB2", "DyWeight-like", "best in-span", "SpanLift-like"]
    assert "floor ‖r⊥‖²" in out and "SpanLift-like" in out
    [(run, artifacts)] = runs_of(store, "halvorsen")
    assert run.info.status == "FINISHED" and sorted(artifacts) == ["halvorsen.csv", "halvorsen.png"]
    floor = table.loc[table["update"] == "best in-span", "mismatch"].item()
    assert run.data.metrics["floor"] == pytest.approx(floor)
    assert run.data.params["train_states"] == "400"


def test_ratio_command(capsys, tmp_path, store, checkpoints) -> None:
    argv = ["--backbone", "gmm", "--samples", "6", "--teacher-nfe", "6", "--out", str(tmp_path)]
    paths = ["--checkpoint", str(checkpoints["ipndm"]), "--checkpoint", str(checkpoints["euler"])]
    code, out, _ = analyze(capsys, "ratio", *paths, *argv, "--tracking-uri", store)
    assert code == 0, out
    table = written(tmp_path, "ratio")
    assert sorted(table["solver"].unique()) == ["euler", "ipndm"]
    assert len(table) == 8 and (table["ratio"] > 0).all()
    [(run, artifacts)] = runs_of(store, "ratio")
    assert sorted(artifacts) == ["ratio.csv", "ratio.png"]
    mean = table.loc[table["solver"] == "euler", "ratio"].mean()
    assert run.data.metrics["ratio_mean/euler"] == pytest.approx(mean)


def test_out_of_span_command(capsys, tmp_path, store, checkpoints) -> None:
    argv = ["--backbone", "gmm", "--samples", "8", "--out", str(tmp_path)]
    solvers = [
        "--checkpoint",
        str(checkpoints["ipndm"]),
        "--checkpoint",
        str(checkpoints["dyweight"]),
    ]
    named = [
        "--solver",
        "ipndm",
        "--nfe",
        "4",
        "--set",
        "order=2",
        "--solver",
        "heun",
        "--nfe",
        "5",
    ]
    code, out, _ = analyze(capsys, "out-of-span", *solvers, *named, *argv, "--tracking-uri", store)
    assert code == 0, out
    table = written(tmp_path, "out-of-span")
    labels = ["spanlift+ipndm", "dyweight", "ipndm[order=2]", "heun"]
    assert list(dict.fromkeys(table["solver"])) == labels
    assert table.loc[table["solver"] == "ipndm[order=2]", "ratio"].max() < 1e-5
    assert table.loc[table["solver"] == "spanlift+ipndm", "ratio"].iloc[0] > 0.5
    assert "spanlift+ipndm" in out.splitlines()[1]  # the table's header
    [(run, artifacts)] = runs_of(store, "out-of-span")
    assert sorted(artifacts) == ["out-of-span.csv", "out-of-span.png"]
    assert run.data.metrics["out_of_span_mean/dyweight"] < 1e-5
    assert run.data.metrics["out_of_span_mean/spanlift_ipndm"] > 1e-3


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["ratio", "--checkpoint", "{missing}"], "no.pt: no such file or folder"),
        (["ratio", "--checkpoint", "{garbage}"], "not a spanlift checkpoint"),
        (["out-of-span", "--checkpoint", "{foreign}"], "not a spanlift solver checkpoint"),
        (["ratio", "--checkpoint", "{dyweight}"], "needs SpanLift checkpoints"),
        (["out-of-span"], "at least one --checkpoint or --solver"),
        (["out-of-span", "--solver", "euler"], "give its --nfe"),
        (["out-of-span", "--set", "order=2", "--solver", "ipndm", "--nfe", "3"], None),
        (["halvorsen", "--spread", "0"], "--spread"),
    ],
)
def test_bad_input_is_one_line_and_status_2(capsys, tmp_path, checkpoints, argv, shown) -> None:
    paths = {**{k: str(v) for k, v in checkpoints.items()}, "missing": str(tmp_path / "no.pt")}
    argv = [a.format(**paths) for a in argv]
    options = ["--out", str(tmp_path), "--no-tracking"]
    if argv[0] != "halvorsen":
        options += ["--backbone", "gmm", "--samples", "4"]
    code, _, err = analyze(capsys, *argv, *options)
    if shown is None:  # --set before any --solver sets every solver's default: not an error
        assert code == 0, err
        return
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("spanlift: error:"), err
    assert shown in lines[0]
