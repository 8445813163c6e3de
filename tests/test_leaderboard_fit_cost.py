"""Each learned row of the leaderboard shows what its fit cost (iterations run, fit seconds,
device-hours where several devices fitted it) and is marked ↗ when its cap stopped the fit while
its validation was still improving; analytic rows show a dash, runs recorded before these
records show what they have. Runs are logged to a real MLflow sqlite store."""

import io
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from spanlift.cli import main
from spanlift.platform.tracking.board_format import format_leaderboard, latex, markdown, write_csv
from spanlift.platform.tracking.entry import Entry
from spanlift.platform.tracking.fit_cost import FitCost

from .mlflow_store import Store
from .test_leaderboard_latex import COLUMNS, compile_latex, demo_board, needs_pdflatex, overfull

THIN = "\u2009"
STILL_IMPROVING = "its cap (fit.iterations) stopped the fit while its validation was still"


def fit_run(
    store: Store,
    solver: str,
    rmse: float,
    ran: int,
    seconds: float,
    best: int,
    stopped_by: str,
    **params: object,
) -> None:
    """A finished run of a learned solver whose fit ran `ran` iterations in `seconds` and kept
    the state of iteration `best`, ended by `stopped_by` ("rule" or "cap")."""
    metrics = {"rmse": rmse, "fit.iterations_run": ran, "fit_seconds": seconds}
    metrics["fit_best_iteration"] = best
    store.log(solver, metrics, fit__stopped_by=stopped_by, fit__iterations=2000, **params)


def board_lines(store: Store) -> dict[str, str]:
    """Each solver's line of the text table."""
    text = format_leaderboard(store.board(), "rmse").splitlines()
    return {line.split()[3]: line for line in text if line.startswith("gmm ")}


def test_each_learned_row_shows_its_fit_cost_and_an_analytic_row_a_dash(
    store: Store, tmp_path: Path
) -> None:
    fit_run(store, "spanlift", 0.1, 1050, 3.5, 800, "rule")
    store.log("euler", {"rmse": 0.3, "fit_seconds": 0.0}, fit__iterations=2000)
    lines = board_lines(store)
    assert f"1{THIN}050 it · 3.5 s" in lines["spanlift"]
    assert lines["euler"].rstrip().endswith(" -") and " it " not in lines["euler"]
    table = markdown(store.board(), "rmse")
    assert "| vs next | fit |" in table
    assert f"| 1{THIN}050 it · 3.5 s |" in table and "| - |" in table
    assert "- fit: iterations run and wall time of the fit" in table
    csv = pd.read_csv(write_csv(store.board(), tmp_path / "board.csv")).set_index("solver")
    assert csv.loc["spanlift", "fit_iterations"] == 1050
    assert csv.loc["spanlift", "fit_seconds"] == 3.5
    assert csv.loc["spanlift", "fit_device_hours"] == pytest.approx(3.5 / 3600)
    assert csv.loc["spanlift", "fit_device"] == "CPU" and csv.loc["spanlift", "fit_devices"] == 1
    assert pd.isna(csv.loc["euler", "fit_iterations"]) and pd.isna(csv.loc["euler", "fit_seconds"])


def test_a_row_of_replicates_shows_their_mean_cost(store: Store) -> None:
    for seed, ran, seconds in ((0, 1000, 10.0), (1, 1100, 20.0)):
        key = {"configuration__key": "dyweight-d"}  # replicates share their configuration
        fit_run(store, "dyweight", 0.2, ran, seconds, 500, "rule", fit__seed=seed, **key)
    (row,) = store.board()
    assert row.n == 2 and row.fit == FitCost(1050.0, 15.0, 15.0 / 3600, 1.0, "CPU", False)
    assert f"1{THIN}050 it · 15 s" in board_lines(store)["dyweight"]


def test_a_fit_on_several_devices_shows_its_device_hours(store: Store) -> None:
    fit_run(store, "spanlift", 0.1, 400, 7200.0, 300, "rule", fit__workers=4, fit__use_gpu=True)
    (row,) = store.board()
    assert row.fit.device_hours == pytest.approx(8.0) and row.fit.device == "GPU"
    assert "400 it · 2.0 h · 8 GPU-h" in board_lines(store)["spanlift"]


def test_a_row_its_cap_stopped_while_still_improving_is_marked(store: Store, capsys) -> None:
    fit_run(store, "spanlift", 0.1, 2000, 30.0, 2000, "cap")  # kept its last validation's state
    fit_run(store, "dyweight", 0.2, 2000, 20.0, 1500, "cap")  # capped, but it had stopped gaining
    fit_run(store, "amed", 0.3, 900, 9.0, 900, "rule")  # the rule stopped it
    store.log("epd", {"rmse": 0.4, "fit_seconds": 12.0}, fit__iterations=200)  # an old run
    rows = {e.solver: e for e in store.board()}
    assert rows["spanlift"].fit.still_improving
    assert not any(rows[name].fit.still_improving for name in ("dyweight", "amed", "epd"))
    assert rows["epd"].fit == FitCost(200.0, 12.0, 12.0 / 3600, 1.0, "CPU", False)
    lines = board_lines(store)
    assert f"2{THIN}000 it · 30 s ↗" in lines["spanlift"]
    assert all("↗" not in lines[name] for name in ("dyweight", "amed", "epd"))
    assert "200 it · 12 s" in lines["epd"]
    table = markdown(list(rows.values()), "rmse")
    assert f"| 2{THIN}000 it · 30 s ↗ |" in table and f"- ↗ {STILL_IMPROVING}" in table
    assert main(store.command()) == 0
    assert f"↗ {STILL_IMPROVING}" in capsys.readouterr().out
    tex = latex(list(rows.values()), "rmse")
    assert r"2\,000 it$^\nearrow$" in tex and r"$\nearrow$ its cap" in tex
    assert main(store.command("--format", "csv")) == 0
    csv = pd.read_csv(io.StringIO(capsys.readouterr().out)).set_index("solver")
    assert csv["fit_still_improving"].to_dict() == {
        "spanlift": True,
        "dyweight": False,
        "amed": False,
        "epd": False,
    }


def test_no_mark_and_no_footnote_where_no_row_was_capped_still_improving(store: Store) -> None:
    fit_run(store, "spanlift", 0.1, 900, 9.0, 900, "rule")
    store.log("heun", {"rmse": 0.3})  # recorded before fit costs: nothing to show
    table = markdown(store.board(), "rmse")
    assert "↗" not in table and STILL_IMPROVING not in table
    assert board_lines(store)["heun"].rstrip().endswith(" -")


def costed_demo_board() -> list[Entry]:
    """The demo's leaderboard with fit costs on its learned rows: a 4-GPU fit and a row its cap
    stopped still improving among them (the widest cells the column has)."""
    costs = {
        (3, "spanlift"): FitCost(12_000, 7777.0, 8.6, 4.0, "GPU", True),
        (3, "dyweight"): FitCost(1050, 3.5, 3.5 / 3600),
        (5, "spanlift"): FitCost(2000, 1234.0, 1234 / 3600, still_improving=True),
        (5, "dyweight"): FitCost(1050, 84.0, 84 / 3600),
    }
    return [replace(e, fit=costs.get((e.nfe, e.solver))) for e in demo_board()]


def test_the_latex_fit_cells_are_stacked_and_analytic_rows_show_a_dash() -> None:
    table = latex(costed_demo_board(), "rmse", COLUMNS)
    assert r"\begin{tabular}[t]{@{}r@{}}12\,000 it$^\nearrow$\\2.2 h\\8.6 GPU-h\end{tabular}" in (
        table
    )
    assert r"Euler & 0.2501 &  & 1 &  & --" in table
    assert "nearrow$ its cap (fit.iterations) stopped the fit" in table  # in the caption


@needs_pdflatex
@pytest.mark.parametrize("columns", [(), COLUMNS])
def test_the_latex_table_with_its_fit_column_fits_a_one_column_article(
    columns: tuple[str, ...], tmp_path: Path
) -> None:
    log = compile_latex(latex(costed_demo_board(), "rmse", columns), tmp_path)
    assert "Overfull \\hbox" not in log, overfull(log)
    assert "Missing character" not in log


def test_a_fit_taken_from_the_fit_cache_shows_the_seconds_its_checkpoint_took(
    store: Store,
) -> None:
    """A run that took its fit from the fit cache (made by an earlier sweep, another node or
    `benchmarks/fill_fit_cache.py`) records 0 fit seconds of its own; its row shows the seconds
    of the fit that made the checkpoint, and the footer says so."""
    metrics = {"rmse": 0.1, "fit.iterations_run": 675, "fit_seconds": 0.0}
    store.log("spanlift", {**metrics, "fit.cached_seconds": 245.0}, fit__stopped_by="rule")
    store.log("dyweight", {**metrics, "rmse": 0.2}, fit__stopped_by="rule")
    lines = board_lines(store)
    assert "675 it · 4 min" in lines["spanlift"]
    assert "675 it " in lines["dyweight"] and "675 it ·" not in lines["dyweight"]  # no time
    text = format_leaderboard(store.board(), "rmse")
    assert "the fit that made the checkpoint it took from the fit cache" in text
