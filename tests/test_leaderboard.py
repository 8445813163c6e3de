"""The leaderboard ranks a run only against runs measured the same way.

Runs are logged to a real MLflow sqlite store; rankings are checked against pandas."""

from pathlib import Path

import pandas as pd
import pytest
from mlflow.entities import Metric, Param

from spanlift.cli import main
from spanlift.platform.tracking.board_format import format_leaderboard, notes, write_csv
from spanlift.platform.tracking.board_plot import leaderboard_figure, plot_leaderboard
from spanlift.platform.tracking.entry import Entry

from .mlflow_store import Store

TEACHER_A = "ipndm[order=4] nfe=35"
TEACHER_B = "dpm_solver_pp[order=3] nfe=50"
SEEDS = "1000000000..1000000255"
OTHER_SEEDS = "2000000000..2000000255"


def rankings(entries: list[Entry]) -> list[tuple[str, ...]]:
    """Each group's solvers in rank order, groups sorted: the ranking without its labels."""
    frame = pd.DataFrame([vars(e) for e in entries]).sort_values("rank")
    assert all(
        list(g["rank"]) == list(range(1, len(g) + 1))
        for _, g in frame.groupby(["backbone", "nfe", "scale"])
    )
    return sorted(tuple(g["solver"]) for _, g in frame.groupby(["backbone", "nfe", "scale"]))


def expected(rows: list[dict], by: list[str]) -> list[tuple[str, ...]]:
    """The same, computed independently: each solver's lowest value, sorted, within `by`."""
    best = pd.DataFrame(rows).fillna("").groupby([*by, "solver"], as_index=False)["value"].min()
    return sorted(tuple(g.sort_values("value")["solver"]) for _, g in best.groupby(by))


TWO_TEACHERS = [  # teacher B's RMSEs are lower, and must not outrank teacher A's solvers
    {"solver": "spanlift", "value": 0.10, "teacher": TEACHER_A, "teacher__test_seeds": SEEDS},
    {"solver": "ipndm", "value": 0.30, "teacher": TEACHER_A, "teacher__test_seeds": SEEDS},
    {"solver": "spanlift", "value": 0.20, "teacher": TEACHER_A, "teacher__test_seeds": SEEDS},
    {"solver": "ipndm", "value": 0.05, "teacher": TEACHER_B, "teacher__test_seeds": SEEDS},
    {"solver": "euler", "value": 0.08, "teacher": TEACHER_B, "teacher__test_seeds": SEEDS},
    {"solver": "dyweight", "value": 0.01},  # an old run: no teacher recorded
]


def test_rmses_against_different_teachers_are_ranked_apart(store: Store) -> None:
    store.log_rows(TWO_TEACHERS)
    entries = store.board()
    assert rankings(entries) == expected(TWO_TEACHERS, ["teacher"])
    assert rankings(entries) == [("dyweight",), ("ipndm", "euler"), ("spanlift", "ipndm")]
    assert {e.rank for e in entries if e.solver == "dyweight"} == {1}


def test_rmses_on_different_test_seeds_are_ranked_apart(store: Store) -> None:
    rows = [
        {"solver": "ipndm", "value": 0.30, "teacher": TEACHER_A, "teacher__test_seeds": SEEDS},
        {
            "solver": "euler",
            "value": 0.01,
            "teacher": TEACHER_A,
            "teacher__test_seeds": OTHER_SEEDS,
        },
    ]
    store.log_rows(rows)
    entries = store.board()
    assert rankings(entries) == [("euler",), ("ipndm",)]
    assert [e.rank for e in entries] == [1, 1]


def test_by_fit_ranks_fits_of_one_budget_together(store: Store) -> None:
    rows = [
        {"solver": "spanlift", "value": 0.10, "teacher": TEACHER_A, "fit__iterations": 1000},
        {"solver": "dyweight", "value": 0.20, "teacher": TEACHER_A, "fit__iterations": 100},
        {"solver": "spanlift", "value": 0.30, "teacher": TEACHER_A, "fit__iterations": 100},
    ]
    store.log_rows(rows)
    together = store.board()
    assert rankings(together) == expected(rows, ["teacher"]) == [("spanlift", "dyweight")]
    apart = store.board(by_fit=True)
    assert rankings(apart) == expected(rows, ["teacher", "fit__iterations"])
    assert rankings(apart) == [("dyweight", "spanlift"), ("spanlift",)]
    text = format_leaderboard(apart, "rmse")
    assert f"rmse against teacher={TEACHER_A}, fit.iterations=1000:" in text.splitlines()


def test_by_fit_option_of_the_command(store: Store, capsys) -> None:
    store.log("ipndm", {"rmse": 0.1}, teacher=TEACHER_A, fit__iterations=100)
    store.log("euler", {"rmse": 0.2}, teacher=TEACHER_A, fit__iterations=200)
    assert main(store.command("--by-fit")) == 0
    assert "fit.iterations=200:" in capsys.readouterr().out
    assert main(store.command()) == 0
    assert "fit.iterations" not in capsys.readouterr().out


def test_throughput_is_ranked_higher_is_better_by_default(store: Store, capsys) -> None:
    metric = "throughput_images_per_s"
    store.log("euler", {metric: 10.0}, eval__device="cpu")
    store.log("ipndm", {metric: 100.0}, eval__device="cpu")
    code = main(store.command("--metric", metric))
    out = capsys.readouterr().out
    assert code == 0 and "higher is better" in out
    ranked = [line.split()[2:4] for line in out.splitlines() if line.startswith("gmm ")]
    assert ranked == [["1", "ipndm"], ["2", "euler"]]
    assert "throughput_images_per_s against eval.device=cpu:" in out


def test_each_group_is_headed_by_what_it_was_measured_against(store: Store) -> None:
    store.log_rows(TWO_TEACHERS)
    lines = format_leaderboard(store.board(), "rmse").splitlines()
    head_a = f"rmse against teacher={TEACHER_A}, teacher.test_seeds={SEEDS}:"
    head_b = f"rmse against teacher={TEACHER_B}, teacher.test_seeds={SEEDS}:"
    assert head_a in lines and head_b in lines
    block_a = lines[lines.index(head_a) + 1 : lines.index(head_a) + 3]
    assert [line.split()[3] for line in block_a] == ["spanlift", "ipndm"]
    block_b = lines[lines.index(head_b) + 1 : lines.index(head_b) + 3]
    assert [line.split()[3] for line in block_b] == ["ipndm", "euler"]


def test_only_recorded_params_are_named(store: Store) -> None:
    store.log("ipndm", {"rmse": 0.1}, teacher=TEACHER_A)
    text = format_leaderboard(store.board(), "rmse")
    assert f"rmse against teacher={TEACHER_A}:" in text.splitlines()


def test_a_metric_outside_the_catalogue_is_grouped_by_its_own_params(store: Store) -> None:
    store.log("ipndm", {"ets": 0.9}, ets__threshold="0.5")
    store.log("euler", {"ets": 0.1}, ets__threshold="1.0")
    store.log("dyweight", {"ets": 0.5}, ets__threshold="1.0", teacher=TEACHER_A)
    entries = store.board("ets", "max")
    assert rankings(entries) == [("dyweight", "euler"), ("ipndm",)]
    assert {e.scale for e in entries} == {"ets.threshold=0.5", "ets.threshold=1.0"}


def test_csv_and_plot_keep_the_groups(store: Store, tmp_path: Path) -> None:
    store.log_rows(TWO_TEACHERS)
    entries = store.board()
    csv = pd.read_csv(write_csv(entries, tmp_path / "board.csv"), keep_default_na=False)
    assert set(csv["scale"]) == {
        "",
        f"teacher={TEACHER_A}, teacher.test_seeds={SEEDS}",
        f"teacher={TEACHER_B}, teacher.test_seeds={SEEDS}",
    }
    assert csv[csv["solver"] == "euler"]["scale"].item().startswith(f"teacher={TEACHER_B}")
    png = plot_leaderboard(entries, "rmse", tmp_path / "board.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_each_row_says_where_its_sampling_ended(store: Store, tmp_path: Path) -> None:
    store.log("heun", {"fid": 1.97}, configuration="heun", schedule="edm_to_zero")
    store.log("dyweight", {"fid": 3.2}, configuration="dyweight", schedule="edm")
    entries = store.board("fid")
    assert {(e.solver, e.ends) for e in entries} == {("heun", "σ=0"), ("dyweight", "σ_min")}
    table = format_leaderboard(entries, "fid").splitlines()
    rows = [line.split() for line in table if line.startswith("gmm ")]
    assert [(row[3], row[5]) for row in rows] == [("heun", "σ=0"), ("dyweight", "σ_min")]
    assert "ends" in write_csv(entries, tmp_path / "board.csv").read_text().splitlines()[0]


@pytest.mark.parametrize("given", ["--tracking-uri", "cwd"])
def test_a_missing_store_is_named_not_created(
    given: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """A read-only command never creates a store: one line naming where it looked, exit 2."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    typo = tmp_path / "mlfow.db"
    argv = ["leaderboard", "--experiment", "digits-nfe"]
    argv += ["--tracking-uri", f"sqlite:///{typo}"] if given == "--tracking-uri" else []
    assert main(argv) == 2
    err = capsys.readouterr().err
    looked = typo if given == "--tracking-uri" else tmp_path / "mlflow.db"
    assert f"no MLflow store at {looked}" in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_experiment_lists_those_that_exist(store: Store, capsys) -> None:
    store.log("ipndm", {"rmse": 0.1})
    argv = ["leaderboard", "--experiment", "no-such", "--tracking-uri", store.uri]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no MLflow experiment named 'no-such'" in err and store.experiment in err


def test_an_unknown_metric_lists_the_metrics_recorded(store: Store, capsys) -> None:
    store.log("ipndm", {"rmse": 0.1, "fid": 3.0})
    assert main(store.command("--metric", "lpips")) == 2
    err = capsys.readouterr().err
    assert "no finished run with metric 'lpips'" in err and "fid, rmse" in err


def test_one_nfe_is_a_bar_per_solver_several_a_line_per_solver(store: Store) -> None:
    store.log("ipndm", {"rmse": 0.1})
    store.log("euler", {"rmse": 0.3})
    (bars,) = leaderboard_figure(store.board(), "rmse").axes
    assert len(bars.patches) == 2 and not bars.lines
    assert [t.get_text() for t in bars.get_xticklabels()] == ["ipndm", "euler"]
    store.log("ipndm", {"rmse": 0.05}, nfe=4)
    store.log("euler", {"rmse": 0.2}, nfe=4)
    (lines,) = leaderboard_figure(store.board(), "rmse").axes
    assert len(lines.lines) == 2 and not lines.patches


def log_replicate(store: Store, value: float, seed: int, version: str, start: int) -> None:
    """A finished run of one fitted configuration (fit seed `seed`) made by code `version`."""
    experiment = store.client.get_experiment_by_name(store.experiment).experiment_id
    tags = {"spanlift.code_version": version}
    run_id = store.client.create_run(experiment, start, tags, "dyweight").info.run_id
    params = {"backbone": "gmm", "nfe": 3, "solver": "dyweight", "configuration": "dyweight"}
    params |= {"configuration.key": "k", "fit.seed": seed}
    store.client.log_batch(
        run_id,
        metrics=[Metric("rmse", value, 0, 0)],
        params=[Param(k, str(v)) for k, v in params.items()],
    )
    store.client.set_terminated(run_id, "FINISHED")


def test_a_row_counts_the_newest_code_versions_runs_once_per_fit_seed(store: Store) -> None:
    """Runs of one configuration made by two result code versions (a solver changed, the sweep
    ran again) are not pooled: the row holds the newest version's runs, each fit seed once."""
    log_replicate(store, 0.50, 0, "old", start=1)
    log_replicate(store, 0.52, 1, "old", start=2)
    log_replicate(store, 0.10, 0, "new", start=3)
    log_replicate(store, 0.12, 0, "new", start=4)  # the same seed again (`--restart`): newest
    log_replicate(store, 0.20, 1, "new", start=5)
    (row,) = store.board()
    assert (row.n, sorted(row.values)) == (2, [0.12, 0.20])
    assert row.protocol["code.version"] == "new" and row.superseded == 3
    assert any("3 runs left out" in line for line in notes([row]))


def test_the_footer_says_how_many_standard_errors_each_rows_interval_spans(store: Store) -> None:
    """A two-replicate interval is 12.71 standard errors either side (Student's t table:
    t_0.975,1 = 12.706, t_0.975,2 = 4.303): the footer says so for the n the table shows."""
    for seed, value in enumerate([0.10, 0.12]):
        store.log("dyweight", {"rmse": value}, fit__seed=seed, configuration__key="d")
    for seed, value in enumerate([0.20, 0.21, 0.25]):
        store.log("bns", {"rmse": value}, fit__seed=seed, configuration__key="b")
    rows = {e.solver: e for e in store.board()}
    assert rows["dyweight"].half_width == pytest.approx(12.706 * 0.0141421 / 2**0.5, rel=1e-4)
    (note,) = [line for line in notes(list(rows.values())) if line.startswith("±")]
    assert "t = 12.71 at n = 2, 4.30 at n = 3" in note
    store.log("euler", {"rmse": 0.3})
    alone = [e for e in store.board() if e.solver == "euler"]
    assert not [line for line in notes(alone) if line.startswith("±")]  # one run: no interval
