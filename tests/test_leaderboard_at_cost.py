"""Would a ranking flip with a longer fit? A fit keeps the states it kept on its way (with their
iteration, fit seconds and validation loss) in its checkpoint; `spanlift leaderboard --at-cost T`
ranks every learned solver at the last of them by T seconds, scored again on its test seeds, and
`--plot curves F.png` draws each learned row's validation loss against fit seconds. Real fits
(`spanlift fit` on the mixture) recorded in a real MLflow sqlite store."""

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from spanlift.backbones import load_backbone
from spanlift.cli import main
from spanlift.errors import SettingsError
from spanlift.platform.fitting.fit import MAX_KEPT, FitSettings, fit, keep_state
from spanlift.platform.fitting.settings import FitResult
from spanlift.platform.sampling.rollout import rollout, seed_noise
from spanlift.platform.sampling.teacher import generate_teacher
from spanlift.platform.tracking.at_cost import at_cost, check_at_cost
from spanlift.platform.tracking.board_curves import curve_of, curves_figure
from spanlift.platform.tracking.leaderboard import leaderboard
from spanlift.platform.tracking.run_files import checkpoint_of, resolved_of
from spanlift.solvers import SolverSpec, build_solver, read_checkpoint
from spanlift.solvers.loading import load_solver

EXPERIMENT = "fit"
FIT = ["--backbone", "gmm", "--nfe", "3", "--threads", "1", "--train-samples", "32"]
FIT += ["--validation-samples", "16", "--test-samples", "16"]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> MlflowClient:
    """Two DyWeight fits (fit seeds 0, 1; 75 iterations, validated every 25) and iPNDM, the
    analytic solver DyWeight starts as, recorded by `spanlift fit`."""
    folder = tmp_path_factory.mktemp("fits")
    uri = f"sqlite:///{folder}/mlflow.db"
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        try:
            assert (
                main(
                    [
                        "fit",
                        "--solver",
                        "dyweight",
                        *FIT,
                        "--iterations",
                        "75",
                        "--lr",
                        "0.01",
                        "--seeds",
                        "0",
                        "1",
                        "--tracking-uri",
                        uri,
                    ]
                )
                == 0
            )
            assert main(["fit", "--solver", "ipndm", *FIT, "--tracking-uri", uri]) == 0
        finally:
            torch.set_num_threads(threads)
    return MlflowClient(uri)


def rows(client: MlflowClient) -> dict:
    return {e.solver: e for e in leaderboard(client, EXPERIMENT)}


def kept_states(client: MlflowClient, run_id: str, folder: Path) -> tuple[list, Path]:
    checkpoint = checkpoint_of(client, run_id, folder)
    return read_checkpoint(checkpoint)["metadata"]["kept_states"], checkpoint


def independent_rmse(client: MlflowClient, run_id: str, state: dict, folder: Path) -> float:
    """The state loaded into the run's solver, rolled out from the run's test seeds and compared
    with the teacher's endpoints there: sqrt of the mean squared difference over every pixel."""
    resolved = resolved_of(client, run_id, folder)
    backbone = load_backbone(resolved.backbone, **resolved.backbone_options)
    seeds = list(resolved.seed_range("test"))
    teacher = generate_teacher(backbone, seeds, SolverSpec.from_dict(resolved.teacher))
    solver = load_solver(
        SolverSpec.from_dict(resolved.solver), checkpoint_of(client, run_id, folder), backbone
    )
    solver.load_state_dict(state)
    with torch.no_grad():
        endpoint = rollout(solver, backbone, seed_noise(seeds, backbone.shape), None)
    return math.sqrt(float(((endpoint - teacher.endpoints).double() ** 2).mean()))


def test_the_fit_keeps_each_state_it_kept_with_its_time(fitted: MlflowClient, tmp_path) -> None:
    row = rows(fitted)["dyweight"]
    kept, _ = kept_states(fitted, row.run_id, tmp_path)
    assert kept[0]["iteration"] == 0 and kept[0]["seconds"] == 0.0  # the starting state first
    assert len(kept) >= 3  # improving over 75 iterations at lr 0.01: 0, 25, 50, ...
    assert all(a["seconds"] < b["seconds"] for a, b in itertools.pairwise(kept))
    assert all(a["val_loss"] > b["val_loss"] for a, b in itertools.pairwise(kept))
    run = fitted.get_run(row.run_id).data.metrics
    assert kept[-1]["iteration"] == run["fit_best_iteration"]
    assert kept[-1]["seconds"] <= run["fit_seconds"]
    times = fitted.get_metric_history(row.run_id, "fit.seconds")
    losses = fitted.get_metric_history(row.run_id, "val_loss")
    assert [m.step for m in times] == [m.step for m in losses] == [0, 25, 50, 75]
    by_step = {m.step: m.value for m in times}
    assert all(by_step[k["iteration"]] == pytest.approx(k["seconds"]) for k in kept)


def state_at(kept: list[dict], seconds: float) -> dict:
    """The last state a fit had kept by `seconds` of fit (its start when none)."""
    return [k for k in kept if k["seconds"] <= seconds][-1]["state"]


def test_at_cost_scores_the_state_kept_by_then(fitted: MlflowClient, tmp_path) -> None:
    board = rows(fitted)
    learned = board["dyweight"]
    kept, _ = kept_states(fitted, learned.run_id, tmp_path)
    early = (kept[1]["seconds"] + kept[2]["seconds"]) / 2  # between its second and third state
    entries, left_out = at_cost(fitted, list(board.values()), early, "rmse", "min")
    assert left_out == []
    ranked = {e.solver: e for e in entries}
    expected = [  # each replicate at the state it had kept by then, whatever its own pace
        independent_rmse(
            fitted, run, state_at(kept_states(fitted, run, tmp_path)[0], early), tmp_path
        )
        for run in learned.run_ids
    ]
    assert list(ranked["dyweight"].values) == pytest.approx(expected, rel=1e-6)
    assert ranked["dyweight"].value == pytest.approx(np.mean(expected), rel=1e-6)
    assert ranked["dyweight"].value > learned.value  # an early state is worse than the kept one
    assert ranked["ipndm"].value == board["ipndm"].value  # analytic rows as recorded
    assert ranked["dyweight"].columns["rank_converged"] == learned.rank
    assert ranked["dyweight"].columns["rmse_converged"] == learned.value
    ends = [
        read_checkpoint(kept_states(fitted, run, tmp_path)[1])["metadata"]
        for run in learned.run_ids
    ]
    ran = [min(early, float(end["fit_seconds"])) for end in ends]
    assert ranked["dyweight"].fit.seconds == pytest.approx(np.mean(ran))  # a fit ends at its end
    assert 0 < ranked["dyweight"].fit.iterations < 75


def test_at_the_start_a_learned_solver_is_its_starting_state(fitted: MlflowClient) -> None:
    board = rows(fitted)
    entries, _ = at_cost(fitted, list(board.values()), 0.0, "rmse", "min")
    ranked = {e.solver: e for e in entries}
    # DyWeight starts as iPNDM (its weight table initialised to iPNDM's): the same endpoints
    assert ranked["dyweight"].value == pytest.approx(board["ipndm"].value, rel=1e-5)
    assert ranked["dyweight"].fit.seconds == 0.0 and ranked["dyweight"].fit.iterations == 0
    assert ranked["ipndm"].vs_next in ("", "≈") and ranked["dyweight"].vs_next in ("", "≈")


def test_past_its_end_a_fit_ranks_as_at_convergence(fitted: MlflowClient) -> None:
    board = list(rows(fitted).values())
    entries, _ = at_cost(fitted, board, 1e6, "rmse", "min")
    for converged, later in zip(board, entries, strict=True):
        assert (later.solver, later.rank) == (converged.solver, converged.rank)
        assert later.value == pytest.approx(converged.value, rel=1e-5)  # the run's own scoring
        assert later.vs_next == converged.vs_next


def test_the_command_heads_the_table_with_its_cost(fitted: MlflowClient, capsys) -> None:
    uri = fitted.tracking_uri
    assert (
        main(["leaderboard", "--experiment", EXPERIMENT, "--tracking-uri", uri, "--at-cost", "0"])
        == 0
    )
    out = capsys.readouterr().out
    assert "at 0 s of fit" in out and "rank_converged" in out and "rmse_converged" in out
    assert (
        main(
            [
                "leaderboard",
                "--experiment",
                EXPERIMENT,
                "--tracking-uri",
                uri,
                "--at-cost",
                "0",
                "--format",
                "latex",
            ]
        )
        == 0
    )
    assert "At 0 s of fit" in capsys.readouterr().out


@pytest.fixture(scope="module")
def two_stage(tmp_path_factory: pytest.TempPathFactory) -> MlflowClient:
    """DyWeight, then a SpanLift on a DyWeight base fitted the same way, recorded by `spanlift
    fit` in one folder: the SpanLift takes its base from the fit cache (fitted by the first
    command), so its own command spent no second on the base."""
    folder = tmp_path_factory.mktemp("two-stage")
    uri = f"sqlite:///{folder}/mlflow.db"
    fit = ["fit", *FIT, "--iterations", "20", "--lr", "0.01", "--tracking-uri", uri]
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        try:
            assert main([*fit, "--solver", "dyweight"]) == 0
            assert main([*fit, "--solver", "spanlift", "--set", "base=dyweight"]) == 0
        finally:
            torch.set_num_threads(threads)
    return MlflowClient(uri)


def test_a_two_stage_fit_is_charged_its_base_fit_everywhere(two_stage, tmp_path) -> None:
    """Before its base's fit ended, a SpanLift had no state of its own: it is not ranked there
    (one line says from when it can be), and from then on every cost of its row counts the base
    (cached or not): the ranking at T, the fit column, the curve's first point."""
    board = rows(two_stage)
    row = board["spanlift"]
    metadata = read_checkpoint(checkpoint_of(two_stage, row.run_id, tmp_path))["metadata"]
    base, own = metadata["base_fit_seconds"], metadata["fit_seconds"]
    assert base > 0 and base == pytest.approx(board["dyweight"].fit.seconds)
    early, left_out = at_cost(two_stage, list(board.values()), base / 2, "rmse", "min")
    assert [e.solver for e in early] == ["dyweight"]
    (line,) = left_out
    assert "spanlift" in line and row.run_id in line and f"{base:.3g} s" in line
    start, _ = at_cost(two_stage, list(board.values()), base, "rmse", "min")
    ranked = {e.solver: e for e in start}
    assert ranked["spanlift"].fit.seconds == pytest.approx(base)  # its base's seconds charged
    assert ranked["spanlift"].fit.iterations == 0  # at its starting state: its fitted base
    assert ranked["spanlift"].value == pytest.approx(board["dyweight"].value, rel=1e-5)
    assert row.fit.seconds == pytest.approx(base + own)  # the fit column: the whole fit
    (end,) = [e for e in at_cost(two_stage, [row], 1e6, "rmse", "min")[0]]
    assert end.fit.seconds == pytest.approx(base + own)
    curve = curve_of(two_stage, row.run_id)
    assert curve["seconds"].iloc[0] == pytest.approx(base)  # drawn from where it can be ranked


@pytest.mark.parametrize(
    ("seconds", "metric", "named"), [(1.0, "fid", "fid"), (-1.0, "rmse", "-1")]
)
def test_what_at_cost_cannot_rank_is_refused_in_one_line(seconds, metric, named) -> None:
    with pytest.raises(SettingsError, match=named) as caught:
        check_at_cost(seconds, metric)
    assert "\n" not in str(caught.value)
    assert metric != "fid" or "rmse" in str(caught.value)


def test_a_run_without_kept_states_is_named(store) -> None:
    store.log("dyweight", {"rmse": 0.2, "fit_seconds": 3.0, "fit.iterations_run": 100})
    store.log("ipndm", {"rmse": 0.3})
    entries, left_out = at_cost(store.client, store.board(), 1.0, "rmse", "min")
    (line,) = left_out
    old = store.board()[0].run_id
    assert old in line and "dyweight" in line and "\n" not in line
    assert [e.solver for e in entries] == ["ipndm"]


def timed_run(store, solver: str, nfe: int, seed: int, values: list[float], timed: bool) -> None:
    """A learned run with a validation curve every 10 iterations, timed (`fit.seconds`) or not."""
    store.log(
        solver,
        {"rmse": values[-1], "fit_seconds": 2.0, "fit_best_iteration": 10 * (len(values) - 1)},
        nfe=nfe,
        fit__seed=seed,
        configuration__key=f"{solver}-{nfe}",
    )
    run = store.client.search_runs(
        [store.client.get_experiment_by_name(store.experiment).experiment_id],
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )[0]
    history = [Metric("val_loss", v, 0, 10 * i) for i, v in enumerate(values)]
    if timed:
        history += [Metric("fit.seconds", 0.5 * i, 0, 10 * i) for i in range(len(values))]
    store.client.log_batch(run.info.run_id, metrics=history)


def test_curves_draw_a_panel_per_backbone_and_nfe(store) -> None:
    timed_run(store, "dyweight", 3, 0, [1.0, 0.1, 0.01], timed=True)
    timed_run(store, "dyweight", 3, 1, [1.0, 0.2, 0.02], timed=True)
    timed_run(store, "spanlift", 3, 0, [0.5, 0.4, 0.3], timed=True)
    timed_run(store, "dyweight", 4, 0, [0.3, 0.2, 0.25], timed=True)
    timed_run(store, "ld3", 4, 0, [0.3, 0.2], timed=False)  # recorded before fits were timed
    store.log("ipndm", {"rmse": 0.5}, nfe=3)
    figure, notes = curves_figure(store.client, store.board(), at_cost=0.7)
    panels = [ax for ax in figure.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["gmm, NFE 3", "gmm, NFE 4"]
    three, four = panels
    curves = [line for line in three.get_lines() if len(line.get_xdata()) > 2]
    assert len(curves) == 3  # a line per fit: two DyWeight seeds, one SpanLift
    assert curves[0].get_color() == curves[1].get_color() != curves[2].get_color()
    (other,) = [line for line in four.get_lines() if len(line.get_xdata()) > 2]
    assert other.get_color() == curves[0].get_color()  # DyWeight in one colour in every panel
    assert list(curves[0].get_xdata()) == [0.0, 0.5, 1.0]
    legend = [t.get_text() for t in three.get_legend().get_texts()]
    assert legend == ["DyWeight (2 fits)", "SpanLift", "--at-cost 0.7 s"]
    assert three.get_yscale() == "log" and four.get_yscale() == "linear"  # 1 to 0.01: decades
    assert three.get_xlabel() == "fit seconds" and "validation loss" in three.get_ylabel()
    (note,) = notes
    assert "LD3" in note and "fit.seconds" in note and "NFE 4" in note


def test_more_solvers_than_colours_are_told_apart(store) -> None:
    """The every-solver table has up to 15 learned rows per NFE; matplotlib's cycle has 10
    colours: no two solvers are drawn alike."""
    learned = ["dyweight", "spanlift", "ld3", "gits", "amed", "amed_plugin", "epd", "epd_plugin"]
    learned += ["dlms", "s4s_alt", "gs", "oss", "bns", "flowturbo", "pas"]
    for n, solver in enumerate(learned):
        timed_run(store, solver, 3, 0, [1.0, 0.5 - 0.01 * n, 0.1], timed=True)
    figure, _ = curves_figure(store.client, store.board())
    (panel,) = [ax for ax in figure.axes if ax.get_visible()]
    legend = panel.get_legend()
    styles = [(line.get_color(), line.get_linestyle()) for line in legend.get_lines()]
    assert len(styles) == len(learned) == len(set(styles))


def test_the_curves_plot_is_a_png_beside_the_board_plot(store, tmp_path, capsys) -> None:
    timed_run(store, "dyweight", 3, 0, [1.0, 0.5], timed=True)
    store.log("ipndm", {"rmse": 0.5})
    for plot in (["curves", str(tmp_path / "c.png")], [str(tmp_path / "b.png")]):
        assert main(store.command("--plot", *plot)) == 0
        assert Path(plot[-1]).read_bytes()[:4] == b"\x89PNG"
    assert main(store.command("--plot", "lines", str(tmp_path / "x.png"))) == 2
    assert "--plot takes F.png or curves F.png" in capsys.readouterr().err


def test_a_fit_keeps_at_most_max_kept_states_spread_over_time() -> None:
    result = FitResult()
    for i in range(3 * MAX_KEPT):
        keep_state(result, i, float(i) ** 2, 1.0 / (i + 1), {"w": torch.tensor(float(i))})
    iterations = [k["iteration"] for k in result.kept]
    assert len(iterations) == MAX_KEPT and iterations[0] == 0 and iterations[-1] == 3 * MAX_KEPT - 1
    gaps = np.diff([k["seconds"] for k in result.kept])
    assert gaps.max() < 4 * gaps[1:].min()  # no stretch of the fit left without a state


def test_a_resumed_fit_keeps_the_states_of_its_first_part(gmm) -> None:
    train = generate_teacher(gmm, range(32), progress=False)
    validation = generate_teacher(gmm, range(5000, 5016), progress=False)
    settings = FitSettings(iterations=20, validate_every=5, checkpoint_every=10, warmup=2)
    states = []

    def solver():
        return build_solver(SolverSpec("dyweight", 3), gmm.sigma_min, gmm.sigma_max, 1)

    whole = fit(
        solver(),
        gmm,
        train,
        settings,
        lambda m, s: s and states.append(s),
        False,
        validation=validation,
    )
    resumed = fit(
        solver(), gmm, train, settings, progress=False, resume=states[0], validation=validation
    )
    assert [k["iteration"] for k in resumed.kept] == [k["iteration"] for k in whole.kept]
    assert sorted(resumed.validation_seconds) == sorted(whole.validation) == [0, 5, 10, 15, 20]
    for a, b in zip(resumed.kept, whole.kept, strict=True):
        assert all(torch.equal(a["state"][k], b["state"][k]) for k in a["state"])
    assert not math.isnan(whole.kept[-1]["val_loss"])


def test_without_validation_the_start_and_the_last_state_are_kept(gmm) -> None:
    train = generate_teacher(gmm, range(32), progress=False)
    result = fit(
        build_solver(SolverSpec("dyweight", 3), gmm.sigma_min, gmm.sigma_max, 1),
        gmm,
        train,
        FitSettings(iterations=5, validation=0.0),
        progress=False,
    )
    assert [k["iteration"] for k in result.kept] == [0, 5]
    assert math.isnan(result.kept[-1]["val_loss"]) and result.kept[-1]["seconds"] > 0
