"""The sweep file's sections are read from their dataclasses: a field is a key, its annotation
the check, its default what an absent key means; the CLI reads the same annotations."""

import argparse
from dataclasses import dataclass, fields

import pytest

from spanlift.cli.options import add_field_options
from spanlift.platform.sweep.config import EvaluationConfig, TeacherConfig, parse_sweep
from spanlift.platform.sweep.resources import Resources
from spanlift.platform.sweep.schema import (
    CountOrAuto,
    PositiveInt,
    PositiveNumber,
    Section,
    SweepConfigError,
    read_fields,
)
from tests.test_sweep_config import VALID


@dataclass(frozen=True)
class Example:
    count: PositiveInt = 1
    share: PositiveNumber | None = None
    batch: CountOrAuto = "auto"
    names: tuple[str, ...] = ()
    label: str = ""


def read(data: dict) -> Example:
    return Example(**read_fields(Section(data, "example", "x.yaml"), Example))


def test_a_new_field_is_a_key_of_its_section_without_touching_the_reader() -> None:
    got = read({"count": 3, "share": 2, "batch": 8, "names": ["a", "b"], "label": "z"})
    assert got == Example(3, 2.0, 8, ("a", "b"), "z")
    assert isinstance(got.share, float)
    assert read({}) == Example()
    assert read({"share": None}).share is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"count": 0}, "x.yaml: example.count: expected a positive integer, got 0"),
        ({"count": True}, "example.count: expected a positive integer, got True"),
        ({"count": 1.5}, "example.count: expected a positive integer, got 1.5"),
        ({"share": -1}, "example.share: expected a positive number, got -1"),
        ({"batch": "all"}, "example.batch: expected a positive integer or auto, got 'all'"),
        ({"names": "a"}, "example.names: expected a list of str values, got 'a'"),
        ({"label": 3}, "example.label: expected a str, got 3"),
        ({"colour": 3}, "example.colour: unknown key; the keys here are: count, share, batch"),
    ],
)
def test_a_bad_value_names_the_file_the_key_and_what_was_expected(data, message) -> None:
    with pytest.raises(SweepConfigError) as error:
        read(data)
    assert message in str(error.value)


OTHER_VALUES = {
    "resources": {
        "trial_cpu": 0.5,
        "workers": 2,
        "worker_cpu": 2,
        "use_gpu": False,
        "worker_gpu": 0.25,
        "max_failures": 0,
        "evaluator_cpu": 1.5,
        "evaluator_gpu": 0.5,
    },
    "evaluation": {
        "metrics": ["latency"],
        "samples": 7,
        "validation_samples": 5,
        "evaluators": 2,
        "detector": "digits",
        "reference": "teacher",
        "reference_samples": 9,
        "batch_size": 16,
    },
    "teacher": {"train_samples": 64, "validation_samples": 16, "test_samples": 8},
}


@pytest.mark.parametrize(
    ("section", "settings"),
    [("resources", Resources), ("evaluation", EvaluationConfig), ("teacher", TeacherConfig)],
)
def test_every_field_of_a_section_is_a_key_its_file_takes(section, settings) -> None:
    """A value other than the default, written in the file, arrives in the typed settings; the
    fields left out are read by their sections' own code (the teacher's solver, the metrics'
    options)."""
    given = OTHER_VALUES[section]
    assert set(given) == {f.name for f in fields(settings)} - {"solver", "options"}
    config = parse_sweep({**VALID, section: given}, "s.yaml")
    for key, value in given.items():
        got = getattr(getattr(config, section), key)
        expected = tuple(value) if isinstance(value, list) else value
        assert got == expected != getattr(settings(), key), key


def test_the_cli_refuses_what_the_sweep_file_refuses(capsys) -> None:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_field_options(parser, EvaluationConfig, ("evaluators", "batch_size"))
    assert parser.parse_args(["--batch-size", "auto"]).batch_size == "auto"
    assert parser.parse_args(["--batch-size", "16"]).batch_size == 16
    with pytest.raises(argparse.ArgumentError, match="expected a positive integer, got '0'"):
        parser.parse_args(["--evaluators", "0"])
    with pytest.raises(argparse.ArgumentError, match="expected a positive integer or auto"):
        parser.parse_args(["--batch-size", "-2"])
    with pytest.raises(SweepConfigError, match=r"evaluation\.evaluators: expected a positive"):
        parse_sweep({**VALID, "evaluation": {"evaluators": 0}}, "s.yaml")
