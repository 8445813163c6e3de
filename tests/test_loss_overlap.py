"""The overlap mark: a run records the pretrained networks its fit loss used (`fit.loss_networks`),
each metric declares the networks it measures with, and the leaderboard marks § a row whose
ranked or shown metric was measured with one of them, in every format, with a footer note.

Runs are logged to a real MLflow sqlite store with the params the recorders write."""

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from spanlift.cli import main
from spanlift.errors import UnknownNameError
from spanlift.platform.evaluation.metrics import METRICS
from spanlift.platform.fitting.losses import LOSSES, networks_param, pretrained_networks
from spanlift.platform.tracking.board_format import SELF_MEASURED, latex, markdown, write_csv
from spanlift.platform.tracking.board_format import format_leaderboard as text
from spanlift.platform.tracking.metrics import measured_with

from .mlflow_store import Store

FITTED = {"fit_seconds": 2.0, "fit.iterations_run": 10.0}  # what a fitted replicate logs
DETECTORS = {
    "inception": "inception:0123456789ab",
    "digits": "digits:3f9a0c1b2d4e",
    "digits_eval": "digits_eval:81da5e0c9b17",
}


def log_fit(store: Store, solver: str, loss: str, detector: str, fid: float, **extra) -> None:
    """A fitted replicate with loss `loss` whose FID was measured with `detector`."""
    params = {
        "loss": loss,
        "fit__loss": loss,
        "fid__detector": DETECTORS[detector],
        "fid__reference": "dataset",
        **{k.replace(".", "__"): v for k, v in networks_param(loss, {}).items()},
        **extra,
    }
    store.log(solver, {"fid": fid, "rmse": 0.1, **FITTED}, **params)


def marked(entries) -> dict[str, bool]:
    return {e.solver: bool(e.overlap) for e in entries}


def test_each_loss_declares_the_pretrained_networks_it_fits() -> None:
    assert set(LOSSES.names()) >= {"mse", "inception", "digits", "pooled", "latent", "adversarial"}
    declared = {name: pretrained_networks(name, {}) for name in LOSSES.names()}  # none missing
    assert declared["mse"] == declared["pooled"] == ()
    assert declared["inception"] == ("inception",) and declared["latent"] == ("dinov2",)
    # the digits feature loss fits the `digits` detector, not the independent digits_eval one
    assert declared["digits"] == ("digits",)
    assert pretrained_networks("adversarial", {"distill": "inception"}) == ("inception",)
    assert declared["adversarial"] == ()  # distils with mse; its critic starts at random
    assert networks_param("mse", {}) == {"fit.loss_networks": ""}
    with pytest.raises(UnknownNameError, match="unknown loss 'perceptual'"):
        pretrained_networks("perceptual", {})


def test_each_metric_declares_the_networks_it_measures_with() -> None:
    assert measured_with("fid", {"fid.detector": DETECTORS["inception"]}) == {"inception"}
    assert measured_with("val_fid", {"fid.detector": DETECTORS["digits_eval"]}) == {"digits_eval"}
    assert measured_with("fid", {}) == frozenset()  # a run that recorded no detector
    assert measured_with("fd_dinov2", {}) == {"dinov2"}
    assert measured_with("lpips", {}) == {"alexnet"}
    assert measured_with("image_reward", {}) == {"imagereward"}
    assert measured_with("rmse", {}) == measured_with("psnr", {}) == frozenset()
    assert "fd_dinov2" in METRICS


def test_an_inception_loss_fit_scored_by_inception_fid_is_marked(store: Store) -> None:
    log_fit(store, "spanlift", "inception", "inception", 4.0)
    log_fit(store, "dyweight", "mse", "inception", 5.0)
    entries = store.board("fid")
    assert marked(entries) == {"spanlift": True, "dyweight": False}
    table = text(entries, "fid")
    assert "spanlift" in table and SELF_MEASURED in table
    row = next(line for line in table.splitlines() if "spanlift" in line)
    assert row.endswith("§") and "§" not in next(s for s in table.splitlines() if "dyweight" in s)
    md = markdown(entries, "fid")
    assert "| spanlift§ |" in md and f"- {SELF_MEASURED} (fid;" in md
    tex = latex(entries, "fid")
    assert r"SpanLift$^{\S}$ &" in tex and r"DyWeight &" in tex
    assert "§" not in tex and r"$^{\S}$ measured with a network the fit's loss used" in tex


def test_digits_loss_is_marked_only_where_fid_uses_the_digits_detector(store: Store) -> None:
    log_fit(store, "spanlift", "digits", "digits", 3.0)
    log_fit(store, "dyweight", "digits", "digits_eval", 6.0)  # the digits backbone's default FID
    entries = store.board("fid")
    by_detector = {e.scale.split(",")[0]: marked([e]) for e in entries}
    assert by_detector == {
        f"fid.detector={DETECTORS['digits']}": {"spanlift": True},
        f"fid.detector={DETECTORS['digits_eval']}": {"dyweight": False},
    }


def test_an_mse_fit_and_runs_from_before_the_param_get_no_mark(store: Store) -> None:
    log_fit(store, "spanlift", "mse", "inception", 4.0)
    store.log(  # recorded before fit.loss_networks existed: no mark, whatever its loss
        "dyweight",
        {"fid": 5.0, **FITTED},
        loss="inception",
        fit__loss="inception",
        fid__detector=DETECTORS["inception"],
        fid__reference="dataset",
    )
    entries = store.board("fid")
    assert marked(entries) == {"spanlift": False, "dyweight": False}
    assert SELF_MEASURED not in text(entries, "fid")


def test_an_unfitted_solver_of_an_inception_loss_sweep_is_not_marked(store: Store) -> None:
    """A sweep records its loss on every run; a solver with nothing to fit learned nothing."""
    store.log(
        "ipndm",
        {"fid": 7.0},
        fit__loss_networks="inception",
        fid__detector=DETECTORS["inception"],
        fid__reference="dataset",
    )
    assert marked(store.board("fid")) == {"ipndm": False}


def test_a_shown_metric_measured_with_the_loss_network_marks_the_row(
    store: Store, tmp_path: Path, capsys
) -> None:
    log_fit(store, "spanlift", "inception", "inception", 4.0)
    assert main([*store.command("--metric", "rmse")]) == 0
    assert "§" not in capsys.readouterr().out  # rmse is measured with no network
    csv = tmp_path / "board.csv"
    assert main([*store.command("--metric", "rmse", "--columns", "fid", "--csv", str(csv))]) == 0
    out = capsys.readouterr().out
    assert SELF_MEASURED in out and "(fid;" in out
    assert "overlap" in csv.read_text().splitlines()[0] and ",fid," in csv.read_text()


def test_spanlift_fit_records_the_networks_of_its_loss(tmp_path, monkeypatch, uri) -> None:
    monkeypatch.chdir(tmp_path)
    fit = ["fit", "--backbone", "gmm", "--nfe", "3", "--iterations", "2", "--threads", "1"]
    fit += ["--train-samples", "8", "--validation-samples", "8", "--test-samples", "8"]
    assert main([*fit, "--solver", "dyweight", "--tracking-uri", uri]) == 0
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("fit").experiment_id
    (run,) = client.search_runs([experiment])
    assert run.data.params["fit.loss"] == "mse"
    assert run.data.params.get("fit.loss_networks", "") == ""
    assert "fit.loss_networks" in run.data.params


def test_write_csv_keeps_the_overlap(store: Store, tmp_path: Path) -> None:
    log_fit(store, "spanlift", "inception", "inception", 4.0)
    path = write_csv(store.board("fid"), tmp_path / "b.csv")
    assert "overlap" in path.read_text().splitlines()[0]
