"""Every command, given a path it cannot use, a mistyped tracking URI or a missing optional
package or weights file, stops before its work with one line on standard error and status 2,
and writes nothing the user did not ask for."""

import sys
from pathlib import Path

import pytest

from spanlift.cli import main

UNWRITABLE = "/proc/spanlift-x"
"""A folder nothing can be created in, not even by root."""
NO_STORE = "sqlite:///{tmp}/no/such/dir/mlflow.db"
"""A tracking URI whose folder does not exist: a typo, not a new store."""
SOLVER = ["--backbone", "gmm", "--solver", "dyweight", "--nfe", "3"]
SMALL_FIT = ["--train-samples", "8", "--validation-samples", "4", "--test-samples", "4"]
SMALL_FIT += ["--iterations", "2"]
EVAL = ["--solver", "euler", "--nfe", "3", "--samples", "8", "--num-cpus", "1"]

CASES = [
    # (id, argv, status, what the line names)
    ("fit-out", ["fit", *SOLVER, *SMALL_FIT, "--out", UNWRITABLE], 2, "--out"),
    ("fit-cache", ["fit", *SOLVER, *SMALL_FIT, "--cache", UNWRITABLE], 2, "--cache"),
    ("fit-out-file", ["fit", *SOLVER, *SMALL_FIT, "--out", "{root}/README.md"], 2, "a file"),
    ("fit-uri", ["fit", *SOLVER, *SMALL_FIT, "--tracking-uri", NO_STORE], 2, "no/such/dir"),
    ("demo-out", ["demo", "--backbone", "gmm", *SMALL_FIT, "--out", UNWRITABLE], 2, "--out"),
    ("sweep-file", ["sweep", "absent.yaml"], 2, "absent.yaml"),
    ("sweep-storage", ["sweep", "{root}/sweeps/gmm_smoke.yaml", "--storage", UNWRITABLE], 2,
     "--storage"),
    ("sweep-uri", ["sweep", "{root}/sweeps/gmm_smoke.yaml", "--storage", "{tmp}/runs",
                   "--tracking-uri", NO_STORE], 2, "no/such/dir"),
    ("eval-lpips", ["eval", *EVAL, "--metrics", "fid,lpips"], 2, "AlexNet"),
    ("eval-lpips-file", ["eval", *EVAL, "--metrics", "lpips", "--lpips-weights", "absent.pth"],
     2, "--lpips-weights"),
    ("eval-cache", ["eval", *EVAL, "--cache-dir", UNWRITABLE], 2, "--cache-dir"),
    ("eval-uri", ["eval", *EVAL, "--tracking-uri", NO_STORE], 2, "no/such/dir"),
    ("export-to", ["export", "--solver", "euler", "--nfe", "3", "--backbone", "gmm", "--to",
                   "diffusers", UNWRITABLE], 2, "--to diffusers"),
    ("export-uri", ["export", "abc", "--to", "diffusers", "{tmp}/out", "--tracking-uri",
                    NO_STORE], 2, "no/such/dir"),
    ("synth-out", ["nowcast", "synth", "--events", "2", "--out", UNWRITABLE], 2, "--out"),
    ("prepare-root", ["nowcast", "prepare", "--sevir-root", "absent", "--out", "lr.zarr"], 2,
     "absent"),
    ("nowcast-data", ["nowcast", "eval", "--data", "absent"], 2, "absent"),
    ("nowcast-out", ["nowcast", "eval", "--data", "{tmp}", "--out", UNWRITABLE], 2, "--out"),
    ("nowcast-uri", ["nowcast", "eval", "--data", "{tmp}", "--tracking-uri", NO_STORE], 2,
     "no/such/dir"),
    ("halvorsen-out", ["analyze", "halvorsen", "--train-states", "8", "--out", UNWRITABLE], 2,
     "--out"),
    ("halvorsen-uri", ["analyze", "halvorsen", "--train-states", "8", "--tracking-uri", NO_STORE],
     2, "no/such/dir"),
    ("ratio-checkpoint", ["analyze", "ratio", "--backbone", "gmm", "--checkpoint", "absent.pt"],
     2, "absent.pt"),
    ("board-plot", ["leaderboard", "--experiment", "e", "--plot", f"{UNWRITABLE}/b.png"], 2,
     "--plot"),
    ("board-csv", ["leaderboard", "--experiment", "e", "--csv", f"{UNWRITABLE}/b.csv"], 2,
     "--csv"),
    ("board-uri", ["leaderboard", "--experiment", "e", "--tracking-uri", NO_STORE], 2,
     "no/such/dir"),
    ("rerun-uri", ["rerun", "0123abcd", "--tracking-uri", NO_STORE], 2, "no/such/dir"),
    ("rerun-cache", ["rerun", "0123abcd", "--cache", UNWRITABLE], 2, "--cache"),
    ("train-digits-out", ["train-digits", "--steps", "2", "--out", f"{UNWRITABLE}/w.pt"], 2,
     "--out"),
    ("train-detector-out", ["train-digits-detector", "--steps", "2", "--out",
                            f"{UNWRITABLE}/w.pt"], 2, "--out"),
    ("train-nowcast-data", ["train-nowcast", "--steps", "2", "--data", "absent"], 2, "absent"),
    ("doctor-sweep", ["doctor", "absent.yaml", "--device", "none"], 2, "absent.yaml"),
    ("doctor-uri", ["doctor", "--device", "none", "--tracking-uri", NO_STORE], 2, "no/such/dir"),
]  # fmt: skip


def filled(argv: list[str], tmp: Path) -> list[str]:
    root = Path(__file__).parent.parent
    return [arg.format(tmp=tmp, root=root) for arg in argv]


@pytest.mark.parametrize(
    ("argv", "status", "named"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_bad_path_or_uri_is_one_line_before_any_work(
    tmp_path, monkeypatch, capsys, argv, status, named
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))  # no AlexNet weights there
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    code = main(filled(argv, tmp_path))
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == status, err
    assert len(lines) == 1 and lines[0].startswith("spanlift"), err
    assert named in lines[0], lines[0]
    assert not (tmp_path / "no").exists(), "a mistyped store's folder was created"
    assert not (tmp_path / "mlflow.db").exists(), "a store was created for a refused command"
    assert not (tmp_path / "runs").exists(), "work was written"
    assert "leaderboard" not in argv or not out, "the table was printed before the refusal"


def forget(monkeypatch, *packages: str) -> None:
    """Imports of `packages` fail from now on, as if they were not installed (the modules that
    imported them are imported again)."""
    for name in [m for m in sys.modules if m.split(".")[0] in packages or "nowcasting" in m]:
        monkeypatch.delitem(sys.modules, name)
    for package in packages:
        monkeypatch.setitem(sys.modules, package, None)


@pytest.mark.parametrize(
    ("argv", "module"), [(["nowcast", "synth", "--events", "2", "--out", "storms"], "h5py")]
)
def test_a_missing_package_is_one_line_naming_it(tmp_path, monkeypatch, capsys, argv, module):
    monkeypatch.chdir(tmp_path)
    forget(monkeypatch, module)
    code = main(filled(argv, tmp_path))
    err = capsys.readouterr().err
    assert code == 2, err
    (line,) = err.strip().splitlines()
    assert module in line and "pip install" in line, line
