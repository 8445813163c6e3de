"""Rankings you can publish: chosen on validation seeds, replicates with intervals, paired
comparisons on the same test seeds, paper-ready tables.

Runs are logged to a real MLflow sqlite store; intervals and bootstrap are checked against
independent computations (scipy's t interval, a NumPy bootstrap written out here)."""

import math

import numpy as np
import pandas as pd
import pytest
from mlflow.entities import Metric, Param
from scipy import stats

from spanlift.cli import main
from spanlift.platform.statistics import paired_ratio_interval, replicate_interval, welch_tied
from spanlift.platform.tracking.board_format import latex, markdown, write_csv
from spanlift.platform.tracking.per_sample import write_errors

from .mlflow_store import Store

TEST_SEEDS = np.arange(10**9, 10**9 + 64)
PROTOCOL = {
    "teacher": "ipndm[order=4] nfe=35",
    "teacher.test_seeds": "1000000000..1000000063",
    "teacher.train_seeds": "0..255 (256)",
    "teacher.validation_seeds": "256..511 (256)",
    "env.dtype": "float32",
    "env.device": "cpu",
    "env.gpus": "0",
}


def log_replicate(
    store: Store,
    tmp_path,
    solver: str,
    configuration: str,
    seed: int,
    errors: np.ndarray,
    validation: float | None,
    **params: object,
) -> str:
    """A finished run of one replicate: its errors per test seed stored, rmse and val_rmse."""
    experiment = store.client.get_experiment_by_name(store.experiment).experiment_id
    run_id = store.client.create_run(experiment, run_name=solver).info.run_id
    metrics = {"rmse": math.sqrt(float(np.mean(errors**2)))}
    metrics |= {"error_median": float(np.median(errors))}
    metrics |= {} if validation is None else {"val_rmse": validation}
    logged = {
        "backbone": "gmm",
        "nfe": 3,
        "solver": solver,
        "configuration": configuration,
        "configuration.key": f"{solver}-{configuration}",
        "fit.seed": seed,
        **PROTOCOL,
        **params,
    }
    store.client.log_batch(
        run_id,
        metrics=[Metric(k, v, 0, 0) for k, v in metrics.items()],
        params=[Param(k, str(v)) for k, v in logged.items()],
    )
    folder = tmp_path / run_id
    folder.mkdir()
    store.client.log_artifact(run_id, str(write_errors(folder, TEST_SEEDS, errors)))
    store.client.set_terminated(run_id, "FINISHED")
    return run_id


def errors_of(scale: float, seed: int) -> np.ndarray:
    """Errors per test seed around `scale`, the same seeds hard or easy for every solver."""
    hardness = np.random.default_rng(0).gamma(2.0, 1.0, len(TEST_SEEDS))
    return (
        scale * hardness * (1 + 0.02 * np.random.default_rng(seed).standard_normal(len(TEST_SEEDS)))
    )


def test_each_solvers_configuration_is_chosen_on_validation_values(store: Store, tmp_path) -> None:
    """Configuration b is better on test seeds, a on validation seeds: a is chosen, and the row
    reports a's test value."""
    for seed in (0, 1):
        log_replicate(store, tmp_path, "dyweight", "a", seed, errors_of(0.20, seed), 0.10)
        log_replicate(store, tmp_path, "dyweight", "b", seed, errors_of(0.10, seed), 0.30)
    (row,) = store.board()
    assert (row.configuration, row.chosen_on, row.n) == ("a", "validation", 2)
    expected = np.mean([math.sqrt(np.mean(errors_of(0.20, s) ** 2)) for s in (0, 1)])
    assert row.value == pytest.approx(expected, rel=1e-12)


def test_a_changed_test_value_changes_no_choice(store: Store, tmp_path) -> None:
    log_replicate(store, tmp_path, "euler", "x", 0, errors_of(0.5, 0), 0.2)
    log_replicate(store, tmp_path, "euler", "y", 0, errors_of(0.1, 0), 0.3)
    before = store.board()[0].configuration
    log_replicate(store, tmp_path, "euler", "x", 1, errors_of(5.0, 1), 0.2)  # a far worse test
    assert before == store.board()[0].configuration == "x"


def test_replicates_are_one_row_with_a_student_t_interval(store: Store, tmp_path) -> None:
    values = []
    for seed in (0, 1, 2):
        errors = errors_of(0.1 * (1 + 0.05 * seed), seed)
        log_replicate(store, tmp_path, "spanlift", "k3", seed, errors, 0.1)
        values.append(math.sqrt(np.mean(errors**2)))
    (row,) = store.board()
    low, high = stats.t.interval(0.95, 2, loc=np.mean(values), scale=stats.sem(values))
    assert (row.n, row.runs) == (3, 3)
    assert row.sd == pytest.approx(np.std(values, ddof=1), rel=1e-12)
    assert row.value - row.half_width == pytest.approx(low, rel=1e-12)
    assert row.value + row.half_width == pytest.approx(high, rel=1e-12)
    assert row.protocol["fit.seed"] == "0, 1, 2"


def test_runs_recorded_before_validation_seeds_are_shown_marked(store: Store, tmp_path) -> None:
    log_replicate(store, tmp_path, "heun", "old", 0, errors_of(0.3, 0), None)
    log_replicate(store, tmp_path, "heun", "older", 0, errors_of(0.4, 0), None)
    log_replicate(store, tmp_path, "ipndm", "old", 0, errors_of(0.9, 0), None)
    log_replicate(store, tmp_path, "ipndm", "new", 0, errors_of(1.0, 0), 0.5)
    rows = {e.solver: e for e in store.board()}
    assert (rows["heun"].configuration, rows["heun"].chosen_on) == ("old", "test")
    assert (rows["ipndm"].configuration, rows["ipndm"].chosen_on) == ("new", "validation")
    out = markdown(list(rows.values()), "rmse")
    assert "heun†" in out and "chosen on test values" in out


def test_a_solvers_only_configuration_is_not_marked_as_chosen_on_test_values(
    store: Store, tmp_path
) -> None:
    """The nowcast suite records one configuration per solver and no validation values: nothing
    was chosen, on test values or otherwise, and the table says so."""
    log_replicate(store, tmp_path, "ddim", "ddim", 0, errors_of(0.3, 0), None)
    log_replicate(store, tmp_path, "spanlift", "spanlift", 0, errors_of(0.2, 0), None)
    rows = store.board()
    assert {e.chosen_on for e in rows} == {"only"}
    for table in (markdown(rows, "rmse"), latex(rows, "rmse")):
        assert "†" not in table and "dagger" not in table and "run the sweep" not in table
        assert "nothing was chosen" in table


def test_the_text_table_shows_run_ids_on_request(store: Store, tmp_path, capsys) -> None:
    ids = [log_replicate(store, tmp_path, "heun", "h", s, errors_of(0.3, s), 0.1) for s in (0, 1)]
    ids.append(log_replicate(store, tmp_path, "euler", "e", 0, errors_of(0.5, 0), 0.2))
    assert main(store.command("--columns", "run_id,error_median")) == 0
    table = capsys.readouterr().out
    heun = next(line for line in table.splitlines() if " heun " in line)
    assert ids[0] in heun and ids[1] not in heun  # a row's first replicate: rerun takes one id
    assert any(ids[2] in line and " euler " in line for line in table.splitlines())
    assert main(store.command("--columns", "run_id", "--format", "markdown")) == 0
    assert ids[2] in capsys.readouterr().out


def independent_bootstrap(
    a: np.ndarray, b: np.ndarray, draws: int, seed: int, paired: bool = False
) -> tuple:
    """The two-level bootstrap of the ratio, written out with loops over draws and replicates."""
    rng = np.random.default_rng(seed)
    ratios = []
    for _ in range(draws):
        seeds = rng.integers(0, a.shape[1], a.shape[1])
        rows_a = rng.integers(0, a.shape[0], a.shape[0])
        rows_b = rows_a if paired else rng.integers(0, b.shape[0], b.shape[0])
        value_a = np.mean([math.sqrt(np.mean(a[r][seeds] ** 2)) for r in rows_a])
        value_b = np.mean([math.sqrt(np.mean(b[r][seeds] ** 2)) for r in rows_b])
        ratios.append(value_a / value_b)
    return tuple(np.percentile(ratios, [2.5, 97.5]))


def test_the_paired_bootstrap_equals_an_independent_numpy_computation() -> None:
    a = np.stack([errors_of(0.10, s) for s in range(3)])
    b = np.stack([errors_of(0.11, s + 10) for s in range(2)])
    ours = paired_ratio_interval(a, b, draws=300, seed=5)
    theirs = independent_bootstrap(a, b, 300, 5)
    assert ours == pytest.approx(theirs, abs=1e-9)
    assert ours[1] < 1  # 10 % lower on every seed: clearly better
    b3 = np.stack([errors_of(0.11, s) for s in range(3)])
    paired = paired_ratio_interval(a, b3, draws=300, seed=5, same_fit_seeds=True)
    assert paired == pytest.approx(independent_bootstrap(a, b3, 300, 5, paired=True), abs=1e-9)


def test_rows_fitted_from_the_same_seeds_are_paired_by_replicate(store: Store, tmp_path) -> None:
    """A SpanLift that kept each of its DyWeight bases is equal to it, replicate by replicate:
    paired, the ratio is 1 exactly; unpaired, the replicates' spread would blur it."""
    for seed in (2, 0, 1):  # logged out of order: rows pair up by fit seed, not by log order
        errors = errors_of(0.1 * (1 + 0.1 * seed), seed)
        log_replicate(store, tmp_path, "spanlift", "s", seed, errors, 0.1)
        log_replicate(store, tmp_path, "dyweight", "d", seed, errors, 0.1)
    first, _ = store.board()
    assert first.fit_seeds == ("0", "1", "2") and first.ratio == (1.0, 1.0)


def test_the_csv_lists_fit_seeds_as_it_lists_run_ids(store: Store, tmp_path) -> None:
    """`fit_seeds` is space-separated, as `run_ids` is: a list a CSV reader splits, not a tuple's
    Python spelling."""
    for seed in (1, 0):
        log_replicate(store, tmp_path, "dyweight", "d", seed, errors_of(0.2, seed), 0.2)
    row = store.board()[0]
    frame = pd.read_csv(write_csv([row], tmp_path / "board.csv"), dtype=str)
    assert frame.loc[0, "fit_seeds"] == "0 1"
    assert frame.loc[0, "run_ids"].split() == list(row.run_ids)


def test_rows_within_noise_are_tied_and_others_are_not(store: Store, tmp_path) -> None:
    for seed in (0, 1):
        log_replicate(store, tmp_path, "a", "a", seed, errors_of(0.1000, seed), 0.1)
        log_replicate(store, tmp_path, "b", "b", seed, errors_of(0.1003, seed + 7), 0.1)
        log_replicate(store, tmp_path, "c", "c", seed, errors_of(0.2000, seed), 0.1)
    rows = store.board()
    assert [(e.solver, e.vs_next) for e in rows] == [("a", "≈"), ("b", "<"), ("c", "")]
    low, high = rows[0].ratio
    assert low < 1 < high and rows[1].ratio[1] < 0.6


def test_a_metric_without_errors_per_seed_is_compared_over_replicates() -> None:
    assert welch_tied([3.0, 3.1, 2.9], [3.05, 2.95, 3.02]) is True
    assert welch_tied([3.0, 3.1, 2.9], [5.0, 5.1, 4.9]) is False
    assert welch_tied([3.0], [5.0, 5.1]) is None
    assert replicate_interval([2.0]).half_width is None


@pytest.mark.filterwarnings("error")
def test_replicates_that_do_not_vary_are_compared_without_a_warning() -> None:
    """A fit seed that changes nothing (GITS: its grid search is deterministic) gives equal
    replicate values: a spread of zero is an answer, not a numerical accident to warn about."""
    assert welch_tied([5.87094939115519] * 2, [5.8, 6.3]) is True
    assert welch_tied([1.0, 1.0], [2.0, 2.1]) is False
    assert welch_tied([0.1, 0.1], [0.1, 0.1]) is True


def test_markdown_and_latex_tables_carry_intervals_ties_bold_and_protocol(
    store: Store, tmp_path
) -> None:
    for seed in (0, 1):
        log_replicate(store, tmp_path, "spanlift", "k3", seed, errors_of(0.1, seed), 0.1)
        log_replicate(store, tmp_path, "dyweight", "d", seed, errors_of(0.2, seed), 0.2)
    rows = store.board()
    table = markdown(rows, "rmse").splitlines()
    best = next(line for line in table if "spanlift" in line)
    assert f"**{rows[0].value:.4f} ± {rows[0].half_width:.4f}**" in best and "| 2 |" in best
    assert "- training seeds: 0..255 (256)" in table
    assert "- validation seeds: 256..511 (256)" in table
    assert "- test seeds: 1000000000..1000000063" in table
    assert "- fit seeds: 0, 1" in table and "- dtype: float32" in table
    tex = latex(rows, "rmse")
    assert r"\textbf{" in tex and r"$\pm$" in tex and r"\begin{tabular}" in tex


def test_the_command_prints_formats_and_extra_columns(store: Store, tmp_path, capsys) -> None:
    log_replicate(store, tmp_path, "euler", "e", 0, errors_of(0.3, 0), 0.3)
    assert main(store.command("--format", "markdown", "--columns", "error_median")) == 0
    out = capsys.readouterr().out
    assert "error_median" in out and f"{np.median(errors_of(0.3, 0)):.4g}" in out
    assert main(store.command("--format", "csv")) == 0
    frame = pd.read_csv(__import__("io").StringIO(capsys.readouterr().out))
    assert {"value", "half_width", "n", "vs_next", "chosen_on"} <= set(frame.columns)
    assert main(store.command("--columns", "no_such")) == 2
    assert "--columns: no finished run" in capsys.readouterr().err


def test_the_protocol_names_each_fit_seed_once(store: Store, tmp_path) -> None:
    """An analytic row (one run, seed 0) beside replicates from seeds 0, 1, 2: the footer says
    `0, 1, 2`, not each row's seeds one after another."""
    log_replicate(store, tmp_path, "ipndm", "i", 0, errors_of(0.3, 0), 0.3)
    for seed in (0, 1, 2):
        log_replicate(store, tmp_path, "dyweight", "d", seed, errors_of(0.2, seed), 0.2)
    table = markdown(store.board(), "rmse").splitlines()
    assert "- fit seeds: 0, 1, 2" in table


def test_a_metric_measured_on_test_samples_only_is_chosen_on_the_searched_metric(
    store: Store,
) -> None:
    """A sweep that searched on RMSE measures FID on its test samples only: a solver's
    configuration for the FID board is chosen on `val_rmse` (its runs' `selection.metric`), never
    on FID, and the row is not marked as chosen on test values."""
    selection = {"selection__metric": "val_rmse"}
    store.log("a", {"fid": 5.0, "val_rmse": 0.1}, configuration="a1", **selection)
    store.log("a", {"fid": 3.0, "val_rmse": 0.3}, configuration="a2", **selection)  # better FID
    store.log("b", {"fid": 4.0, "val_rmse": 0.2}, configuration="b1", **selection)
    rows = store.board("fid")
    assert [(e.solver, e.configuration, e.value) for e in rows] == [
        ("b", "b1", 4.0),
        ("a", "a1", 5.0),
    ]
    assert all(e.chosen_on == "val_rmse" for e in rows)
    table = markdown(rows, "fid")
    assert "†" not in table and "chosen on val_rmse" in table


def test_rows_equal_to_float_rounding_are_tied(store: Store, tmp_path) -> None:
    """Two solvers that compute the same endpoints by other float operations (a diffusers
    scheduler and spanlift's own loop) differ by ~1e-7 on every seed: a tie, not a ranking."""
    errors = errors_of(0.2, 0)
    log_replicate(store, tmp_path, "euler", "e", 0, errors * (1 - 3e-7), 0.2)
    log_replicate(store, tmp_path, "diffusers:EulerDiscreteScheduler", "d", 0, errors, 0.2)
    first, _ = store.board()
    assert first.vs_next == "≈", first.ratio
