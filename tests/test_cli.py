"""The `spanlift` command: listings work, user errors are one line and exit status 2."""

import pytest

from spanlift.backbones import BACKBONES
from spanlift.cli import main
from spanlift.solvers import SOLVERS


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_solvers_lists_every_solver_with_settings(capsys):
    code, out, _ = run(capsys, "solvers")
    assert code == 0
    for name in SOLVERS.names():
        assert name in out
    assert "kernel_size=3" in out and "order=3" in out


def test_backbones_lists_every_backbone(capsys):
    code, out, _ = run(capsys, "backbones")
    assert code == 0 and all(name in out for name in BACKBONES.names())


def small(tmp_path, argv=()):
    """Options for a tiny, fast run on the Gaussian mixture, except those `argv` already sets."""
    defaults = {
        "--backbone": "gmm",
        "--cache": str(tmp_path / "cache"),
        "--out": str(tmp_path / "out"),
        "--train-samples": "16",
        "--test-samples": "8",
        "--iterations": "4",
    }
    return [item for key, value in defaults.items() if key not in argv for item in (key, value)]


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (
            ["fit", "--solver", "dyweight", "--nfe", "3", "--backbone", "nope"],
            "unknown backbone 'nope'",
        ),
        (["fit", "--solver", "rk45", "--nfe", "3"], "unknown solver 'rk45'"),
        (["fit", "--solver", "heun", "--nfe", "4"], "nfe=4"),
        (["fit", "--solver", "spanlift", "--nfe", "3", "--set", "kernel_size=4"], "got 4"),
        (["fit", "--solver", "spanlift", "--nfe", "3", "--set", "kernal_size=3"], "'kernal_size'"),
        (["fit", "--solver", "spanlift", "--nfe", "3", "--set", "kernel_size"], "key=value"),
        (
            ["fit", "--solver", "spanlift", "--nfe", "3", "--set", "base_checkpoint=/no/such.pt"],
            "/no/such.pt",
        ),
        (["fit", "--solver", "dyweight", "--nfe", "3", "--lr", "-1"], "lr"),
        (["fit", "--solver", "dyweight", "--nfe", "3", "--train-samples", "0"], "train-samples"),
    ],
)
def test_user_errors_are_one_line_with_status_2(capsys, tmp_path, argv, shown):
    code, _, err = run(capsys, *argv, *small(tmp_path, argv))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("spanlift: error:"), err
    assert shown in lines[0]
    assert "Traceback" not in err


def test_bad_input_costs_no_compute(capsys, tmp_path):
    """A bad setting is rejected before the teacher is generated."""
    run(
        capsys,
        "fit",
        "--solver",
        "spanlift",
        "--nfe",
        "3",
        "--set",
        "kernel_size=4",
        *small(tmp_path),
    )
    assert not (tmp_path / "cache").exists()


def test_fit_writes_a_checkpoint(capsys, tmp_path):
    code, out, _ = run(capsys, "fit", "--solver", "dyweight", "--nfe", "3", *small(tmp_path))
    assert code == 0
    (checkpoint,) = (tmp_path / "out").glob("dyweight-nfe3-*.pt")
    assert str(checkpoint) in out and "RMSE" in out
