"""Evaluation metrics are plug-ins (`platform/evaluation/metrics/`): a registration names each, its
options are declared once, and a metric file dropped into the package is read by everything that
reads metrics (the catalogue, the sweep schema and its run key, `spanlift eval`, the evaluator)
without any other file naming it."""

from dataclasses import fields
from pathlib import Path

import pytest

from spanlift.platform.evaluation.metrics import METRICS, SampleMetric, SolverMetric
from spanlift.platform.sweep.config import EvaluationConfig, SweepConfigError, parse_sweep
from spanlift.platform.tracking.metrics import METRICS as CATALOGUE
from tests.package_copy import read_back

DROPPED_METRIC = '''
"""brightness: the mean value of a sample, times a scale."""

from dataclasses import dataclass

from spanlift.errors import OptionError
from spanlift.platform.evaluation.metrics.base import METRICS, Finished, Options, Row, SampleMetric
from spanlift.platform.evaluation.metrics.states import MeanState


@dataclass(frozen=True)
class BrightnessOptions(Options):
    brightness_scale: float = 1.0
    """Factor on the mean value."""

    def __post_init__(self):
        if self.brightness_scale <= 0:
            raise OptionError("brightness_scale", self.brightness_scale, "a positive number")


@METRICS.register("brightness")
class Brightness(SampleMetric):
    Options = BrightnessOptions
    rows = (Row("brightness", "max", "mean sample value", ("eval.samples",)),)

    def state(self, batch, network):
        means = batch.samples.double().flatten(1).mean(dim=1)
        return MeanState(float(means.sum()) * self.options.brightness_scale, len(means))

    def finish(self, state, prepared, done):
        return Finished({"brightness": state.mean})
'''

READ_BACK = """
import contextlib, io, json, sys, tempfile
from pathlib import Path
import spanlift
from spanlift.cli import main
from spanlift.platform.evaluation.evaluator import Evaluator, EvaluatorSetup
from spanlift.platform.sweep.config import SweepConfigError, parse_sweep
from spanlift.platform.sweep.evaluation import evaluation_settings
from spanlift.platform.tracking.metrics import METRICS, produced_by
from spanlift.solvers import SolverSpec

sweep = {
    "experiment": "dropped", "backbone": "gmm", "solvers": [{"name": "euler", "nfe": 3}],
    "search": {"metric": "brightness", "mode": "max"},
    "evaluation": {"metrics": ["brightness"], "brightness_scale": 2.0},
}
config = parse_sweep(sweep)
try:
    parse_sweep({**sweep, "evaluation": {"metrics": ["brightness"], "brightness_scale": -1.0}})
except SweepConfigError as exc:
    refused = str(exc)
setup = EvaluatorSetup("gmm", "", Path(tempfile.mkdtemp()), options=config.evaluation.options)
spec = SolverSpec("euler", 3)
state = Evaluator(setup).solver_states(spec, None, [0, 1, 2], ["brightness"])["brightness"]
shown = io.StringIO()
with contextlib.redirect_stdout(shown), contextlib.suppress(SystemExit):
    main(["eval", "--help"])
print(json.dumps({
    "package": spanlift.__file__,
    "mode": METRICS["brightness"].mode,
    "produced": "brightness" in produced_by(("brightness",)),
    "keyed": evaluation_settings(config)["brightness_scale"],
    "refused": refused,
    "count": state.count,
    "option": "--brightness-scale" in shown.getvalue(),
}))
"""


def test_every_registered_metric_is_named_by_its_registration() -> None:
    assert [(key, cls.name) for key, cls in METRICS] == [(key, key) for key in METRICS.names()]
    assert all(issubclass(cls, (SampleMetric, SolverMetric)) for _, cls in METRICS)


def test_each_option_key_is_declared_by_one_metric_and_is_no_key_of_the_section() -> None:
    keys = [key for _, metric in METRICS for key in metric.option_names()]
    section = {f.name for f in fields(EvaluationConfig)}
    assert len(keys) == len(set(keys)) and not set(keys) & section


def test_every_metrics_rows_are_in_the_catalogue() -> None:
    rows = [row for _, metric in METRICS for row in metric.rows]
    assert rows and all(CATALOGUE[row.name] == row for row in rows)


def test_a_bad_option_value_is_refused_with_its_key() -> None:
    sweep = {"experiment": "t", "backbone": "gmm", "solvers": [{"name": "euler", "nfe": 3}]}
    with pytest.raises(SweepConfigError, match=r"evaluation\.lpips_weights: expected a str, got 3"):
        parse_sweep({**sweep, "evaluation": {"metrics": ["lpips"], "lpips_weights": 3}}, "s.yaml")
    with pytest.raises(SweepConfigError, match=r"evaluation\.lpips_wieghts: unknown key; .*"):
        parse_sweep({**sweep, "evaluation": {"lpips_wieghts": "a.pth"}}, "s.yaml")


def test_an_evaluation_section_pickled_with_options_as_fields_gets_them_back() -> None:
    """A Tune state saved before metrics declared their options holds them as fields."""
    stored = EvaluationConfig.__new__(EvaluationConfig)
    stored.__setstate__(
        {"metrics": ("lpips",), "samples": 8, "lpips_weights": Path("a.pth"), "batch_size": 4}
    )
    assert stored.options["lpips_weights"] == Path("a.pth")
    assert stored.options["skill_convention"] == "exact"  # a default, filled in
    assert stored.settings()["lpips_weights"] == Path("a.pth") and stored.samples == 8


def test_a_metric_file_dropped_into_the_package_is_read_everywhere(tmp_path: Path) -> None:
    """A copy of the package with one new metric file, imported in a fresh process: the
    catalogue lists it, a sweep searches on it with its option (checked by the metric, and part
    of the run key), `spanlift eval` offers the option, an evaluator computes it."""
    copy = tmp_path / "spanlift"
    seen = read_back(
        tmp_path, {"platform/evaluation/metrics/brightness.py": DROPPED_METRIC}, READ_BACK
    )
    assert seen["package"] == str(copy / "__init__.py")
    assert seen["mode"] == "max" and seen["produced"] and seen["keyed"] == 2.0
    assert "evaluation.brightness_scale: expected a positive number, got -1.0" in seen["refused"]
    assert seen["count"] == 3 and seen["option"]
