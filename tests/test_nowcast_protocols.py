"""What a user chooses on the command line to match a published SEVIR table (split protocol,
dates), and damaged compressed data reported in one line."""

from pathlib import Path

import h5py
import numpy as np
import pytest

from spanlift.cli import parser
from spanlift.cli.nowcast import suite_request
from spanlift.errors import DataError
from spanlift.nowcasting.store import prepare_sevir_lr, read_vil, read_windows
from spanlift.nowcasting.synthetic import write_synthetic_sevir
from spanlift.nowcasting.windows import SplitSettings
from spanlift.platform.nowcast_suite import backbone_options
from tests.cli_run import spanlift


def test_eval_flags_choose_the_split_protocol_and_dates() -> None:
    flags = ["--split", "prediff", "--start", "2018-06-01", "--end", "2019-12-31"]
    args = parser().parse_args(["nowcast", "eval", *flags, "--no-tracking"])
    request = suite_request(args)
    assert request.split == SplitSettings("prediff", "2018-06-01", "2019-12-31")
    options = backbone_options(request)
    assert (options["split"], options["start"], options["end"]) == (
        "prediff",
        "2018-06-01",
        "2019-12-31",
    )
    default = suite_request(parser().parse_args(["nowcast", "eval", "--no-tracking"]))
    assert default.split == SplitSettings() and "start" not in backbone_options(default)


def test_eval_flag_chooses_the_scoring_convention() -> None:
    args = ["nowcast", "eval", "--convention", "earthformer", "--no-tracking"]
    assert suite_request(parser().parse_args(args)).convention == "earthformer"
    default = suite_request(parser().parse_args(["nowcast", "eval", "--no-tracking"]))
    assert default.convention == "exact"
    with pytest.raises(SystemExit):
        parser().parse_args(["nowcast", "eval", "--convention", "pysteps"])


def damage_first_chunk(path: Path, dataset: str) -> None:
    """Overwrite the middle of the first compressed chunk of `dataset`; the size stays."""
    with h5py.File(path, "r") as file:
        info = file[dataset].id.get_chunk_info(0)
    size = path.stat().st_size
    with path.open("r+b") as raw:
        raw.seek(info.byte_offset + info.size // 2)
        raw.write(bytes(range(256)) * 4)
    assert path.stat().st_size == size


@pytest.fixture(scope="module")
def two_events(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("damaged") / "root"
    return write_synthetic_sevir(
        out, events=2, start="2019-05-01", end="2019-07-01", progress=False
    )


def test_a_damaged_chunk_of_a_prepared_store_is_one_data_error(
    two_events: Path, tmp_path: Path
) -> None:
    store = prepare_sevir_lr(two_events, tmp_path / "windows.nc", progress=False)
    damage_first_chunk(store, "vil")
    windows = read_windows(store)
    with pytest.raises(DataError, match=r"windows\.nc: a window could not be read") as raised:
        read_vil(windows, np.arange(windows.sizes["window"]))
    assert "\n" not in str(raised.value)


@pytest.mark.e2e
def test_prepare_of_a_damaged_sevir_file_exits_2_in_one_line_and_writes_nothing(
    two_events: Path, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "CATALOG.csv").write_bytes((two_events / "CATALOG.csv").read_bytes())
    for source in (two_events / "data").rglob("*.h5"):
        target = root / source.relative_to(two_events)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())
    damaged = next((root / "data").rglob("*.h5"))
    damage_first_chunk(damaged, "vil")
    out = tmp_path / "out" / "windows.zarr"
    result = spanlift(tmp_path, "nowcast", "prepare", "--sevir-root", str(root), "--out", str(out))
    assert result.returncode == 2, result.stderr
    progress = "SEVIR-LR:"  # the prepare's progress bar, also on stderr
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith(progress)]
    assert len(lines) == 1 and damaged.name in lines[0] and "cannot be read" in lines[0], lines
    assert not out.exists() and list(out.parent.iterdir()) == []
