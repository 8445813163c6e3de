"""The README's Python tour runs as printed, and says what it shows: SpanLift beats its base."""

import re
import runpy
from pathlib import Path

import pytest

from tests.cli_run import ROOT


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def test_the_python_tour_runs_and_spanlift_improves_on_its_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    (tour,) = python_blocks((ROOT / "README.md").read_text())
    script = tmp_path / "tour.py"
    script.write_text(tour)
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(script), run_name="__main__")
    lines = [line for line in capsys.readouterr().out.splitlines() if " rmse " in line]
    rmse = {line.split()[0]: float(line.split()[-1]) for line in lines}
    assert len(rmse) == 3
    base, learned = rmse["ipndm[order=3]"], rmse[next(k for k in rmse if k.startswith("spanlift"))]
    assert learned < base
    assert (tmp_path / "runs" / "teacher").is_dir()  # the teacher went where the comment says
