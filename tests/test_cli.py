"""The `spanlift` command: listings work, user errors are one line and exit status 2."""

import subprocess
import sys

import pytest

from spanlift.backbones import BACKBONES
from spanlift.cli import main
from spanlift.solvers import SOLVERS
from tests.cli_run import ROOT, command_environment


def run(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as exit:  # argparse's own usage errors end the process, as on a terminal
        code = exit.code
    out, err = capsys.readouterr()
    return code, out, err


def test_solvers_lists_every_solver_with_settings(capsys):
    code, out, _ = run(capsys, "solvers")
    assert code == 0
    for name in SOLVERS.names():
        assert name in out
    assert "kernel_size=3" in out and "order=3" in out
    assert "cites: Lu et al., 2022 (DPM-Solver++)" in out
    assert "reference: LuChengTHU/dpm-solver" in out


def test_backbones_lists_every_backbone(capsys):
    code, out, _ = run(capsys, "backbones")
    assert code == 0 and all(name in out for name in BACKBONES.names())


def test_backbones_name_the_download_command_the_docs_name(capsys):
    """`hf download` (the current Hugging Face command) in the listing, the code and the docs;
    the retired `huggingface-cli` nowhere."""
    code, out, _ = run(capsys, "backbones")
    assert code == 0 and "`hf download Efficient-Large-Model/Sana_600M_512px_diffusers" in out
    files = [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("spanlift/**/*.py")]
    assert [str(f) for f in files if "huggingface-cli" in f.read_text()] == []


def small(tmp_path, argv=()):
    """Options for a tiny, fast run on the Gaussian mixture, recorded nowhere, except those
    `argv` already sets."""
    defaults = {
        "--backbone": "gmm",
        "--cache": str(tmp_path / "cache"),
        "--out": str(tmp_path / "out"),
        "--train-samples": "16",
        "--validation-samples": "8",
        "--test-samples": "8",
        "--iterations": "4",
    }
    chosen = [item for key, value in defaults.items() if key not in argv for item in (key, value)]
    return [*chosen, "--no-tracking"]


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
    # spanlift's own check, or the option's type when argparse reads it (`spanlift fit: error:`)
    prefixes = ("spanlift: error:", f"spanlift {argv[0]}: error:")
    assert len(lines) == 1 and lines[0].startswith(prefixes), err
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


def test_help_shows_defaults_from_the_code_and_names_from_the_registries(capsys):
    from spanlift.platform.fitting.fit import FitSettings
    from spanlift.solvers.schedules import SCHEDULES

    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert f"Optimizer steps of the fit. (default: {FitSettings().iterations})" in shown
    assert all(name in shown for name in SCHEDULES.names())  # flow too
    assert "(default: runs/fit)" in shown and "(default: None)" not in shown


def test_options_follow_the_fields_of_a_settings_dataclass():
    import argparse
    from dataclasses import dataclass
    from pathlib import Path

    from spanlift.cli.options import DefaultsShown, add_field_options

    @dataclass
    class Settings:
        steps: int = 7
        """Steps to take."""
        rate: float = 0.5
        weights: Path | None = None
        """Weights file."""

    parser = argparse.ArgumentParser(formatter_class=DefaultsShown)
    add_field_options(parser, Settings, ["steps", "rate", "weights"], defaults={"rate": 0.25})
    args = parser.parse_args(["--steps", "3", "--weights", "w.pt"])
    assert (args.steps, args.rate, args.weights) == (3, 0.25, Path("w.pt"))
    shown = " ".join(parser.format_help().split())
    assert "Steps to take. (default: 7)" in shown and "rate (default: 0.25)" in shown


def test_eval_seed_offset_reaches_the_request(capsys, monkeypatch):
    from spanlift.platform import run_eval
    from spanlift.seeds import FID_FIRST_SEED

    requests = []
    monkeypatch.setattr(
        run_eval, "run_eval", lambda r, *_: requests.append(r) or run_eval.EvalReport()
    )
    eval_argv = ["eval", "--backbone", "gmm", "--solver", "euler", "--nfe", "3", "--no-tracking"]
    assert run(capsys, *eval_argv)[0] == 0
    assert run(capsys, *eval_argv, "--seed-offset", "7")[0] == 0
    assert [r.first_seed for r in requests] == [FID_FIRST_SEED, 7]


def test_sample_seeds_start_at_the_first_seed_asked_for():
    from pathlib import Path
    from types import SimpleNamespace

    from spanlift.platform.evaluation.evaluator import EvaluatorSetup
    from spanlift.platform.evaluation.metrics.reference import ReferenceSet
    from spanlift.platform.evaluation.sample_metrics import evaluate_samples
    from spanlift.solvers import SolverSpec

    class Pool:
        setup, seeds, actors = EvaluatorSetup("gmm", "", Path(".")), None, [None]

        def call(self, name):
            return "cpu" if name == "device_name" else False

        def solver_states(self, spec, checkpoint, seeds, metrics, desc):
            self.seeds = seeds
            return {"sampling": SimpleNamespace(mean=0.001)}

    pool = Pool()
    evaluate_samples(
        pool, SolverSpec("euler", 3), None, 4, ("latency",), ReferenceSet("dataset"), 5
    )
    assert pool.seeds == [5, 6, 7, 8]


def test_a_backbone_without_a_dataset_points_to_a_statistics_file(tmp_path):
    from types import SimpleNamespace

    from spanlift.errors import SettingsError
    from spanlift.platform.evaluation.evaluator import EvaluatorSetup
    from spanlift.platform.evaluation.metrics.fid import reference_moments
    from spanlift.platform.evaluation.metrics.reference import ReferenceSet

    pool = SimpleNamespace(setup=EvaluatorSetup("gmm", "digits", tmp_path))
    with pytest.raises(SettingsError, match=r"ships no dataset; .*--reference <file\.npz>"):
        reference_moments(pool, ReferenceSet("dataset"), "digits")


def test_output_cut_short_by_a_pipe_ends_quietly(tmp_path):
    """`spanlift solvers | head -1`: the reader leaves early; the command stops without a
    traceback, with status 1 (a shell tool dies of SIGPIPE: also not 0)."""
    reader = subprocess.Popen(["head", "-1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    writer = subprocess.run(
        [sys.executable, "-m", "spanlift.cli", "solvers"],
        stdout=reader.stdin,
        stderr=subprocess.PIPE,
        env=command_environment(tmp_path),
        text=True,
        timeout=120,
    )
    reader.stdin.close()
    first = reader.stdout.read()
    reader.wait()
    assert first and writer.stderr == ""
    assert writer.returncode == 1
