"""Files the project writes get the mode any file the user writes gets: 0666 less the umask."""

import os
import stat

import pytest

from spanlift.cli import main
from spanlift.files import atomic_write
from spanlift.solvers import SolverSpec, build_solver, save_solver


@pytest.fixture
def umask_027():
    """The process's umask set to 027 for the test, then set back."""
    before = os.umask(0o027)
    yield 0o640
    os.umask(before)


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_an_atomic_write_has_the_umask_mode_not_the_temporary_files(tmp_path, umask_027) -> None:
    with atomic_write(tmp_path / "table.csv") as partial:
        partial.write_text("a,b\n")
    checkpoint = tmp_path / "euler.pt"
    save_solver(checkpoint, build_solver(SolverSpec("dyweight", 3), 0.002, 80.0, 1))
    assert (mode(tmp_path / "table.csv"), mode(checkpoint)) == (umask_027, umask_027)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["euler.pt", "table.csv"]


def test_an_exported_scheduler_folder_has_the_umask_mode(tmp_path, umask_027, capsys) -> None:
    pytest.importorskip("diffusers")
    out = tmp_path / "scheduler"
    argv = ["export", "--solver", "ipndm", "--nfe", "5", "--backbone", "gmm"]
    assert main([*argv, "--to", "diffusers", str(out)]) == 0
    assert {p.name: mode(p) for p in out.iterdir()} == {
        "scheduler_config.json": umask_027,
        "solver.safetensors": umask_027,
    }
