"""The SEVIR data layer: the reader against h5py, SEVIR-LR pooling, windows and date splits,
prepared stores, one DataError per kind of bad input, and the synthetic storm generator."""

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

import dask.array as da
import h5py
import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr

from spanlift.errors import DataError, SettingsError
from spanlift.nowcasting import store as store_module
from spanlift.nowcasting.sevir import CATALOG_COLUMNS, REQUIRED_COLUMNS, open_sevir, read_catalog
from spanlift.nowcasting.store import (
    SCHEMA,
    open_prepared,
    prepare_sevir_lr,
    read_windows,
)
from spanlift.nowcasting.synthetic import event_times, storm_frames, write_synthetic_sevir
from spanlift.nowcasting.windows import (
    TEST_START,
    VAL_START,
    SplitSettings,
    sevir_windows,
    split_windows,
    to_sevir_lr,
)

# 5 events at 10 %, 30 %, …, 90 % of this span: 1 train, 2 val, 2 test windows' worth of events.
EVENTS, START, END = 5, "2018-11-01", "2019-09-01"


@pytest.fixture(scope="module")
def sevir_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sevir") / "root"
    return write_synthetic_sevir(out, events=EVENTS, start=START, end=END, progress=False)


@pytest.fixture
def root_copy(sevir_root: Path, tmp_path: Path) -> Path:
    """A private copy of the synthetic root for tests that break it."""
    return Path(shutil.copytree(sevir_root, tmp_path / "root"))


@pytest.fixture(scope="module")
def windows(sevir_root: Path) -> xr.Dataset:
    return sevir_windows(to_sevir_lr(open_sevir(sevir_root))).load()


def edit_catalog(root: Path, change: Callable[[pd.DataFrame], pd.DataFrame]) -> None:
    path = root / "CATALOG.csv"
    change(pd.read_csv(path, dtype={"id": str})).to_csv(path, index=False)


def catalog_rows(root: Path) -> pd.DataFrame:
    return pd.read_csv(root / "CATALOG.csv", dtype={"id": str})


def raw_event(root: Path, row: pd.Series) -> np.ndarray:
    """The event straight from its HDF5 file as (time, y, x)."""
    with h5py.File(root / "data" / row.file_name, "r") as file:
        return np.moveaxis(file["vil"][row.file_index], -1, 0)


def rewrite_file(root: Path, file_name: str, **datasets: np.ndarray) -> None:
    """Replace an HDF5 file by one holding exactly `datasets`."""
    with h5py.File(root / "data" / file_name, "w") as file:
        for name, data in datasets.items():
            file.create_dataset(name, data=data)


# --- reading -------------------------------------------------------------------------------------


def test_reader_agrees_with_h5py_element_for_element(sevir_root: Path) -> None:
    ds = open_sevir(sevir_root)
    catalog = catalog_rows(sevir_root)
    assert isinstance(ds.vil.data, da.Array)
    assert ds.vil.dtype == np.uint8 and ds.vil.dims == ("event", "time", "y", "x")
    assert ds.vil.data.chunks[0] == (1,) * EVENTS  # one chunk per event
    assert ds.time.values.tolist() == list(range(-120, 121, 5))
    assert ds.event.values.tolist() == catalog.id.tolist()
    np.testing.assert_array_equal(
        ds.time_utc.values, pd.to_datetime(catalog.time_utc).to_numpy(dtype="datetime64[ns]")
    )
    np.testing.assert_allclose(ds.llcrnrlat.values, catalog.llcrnrlat)
    assert ds.episode_id.values.tolist() == catalog.episode_id.tolist()
    for position in (0, EVENTS - 1):
        expected = raw_event(sevir_root, catalog.iloc[position])
        assert expected.max() > 100  # a storm, not an empty frame
        np.testing.assert_array_equal(ds.vil[position].values, expected)


def test_catalog_is_filtered_by_img_type(root_copy: Path) -> None:
    def add_satellite_row(catalog: pd.DataFrame) -> pd.DataFrame:
        satellite = catalog.iloc[[0]].assign(
            img_type="ir069", file_name="ir069/2018/SEVIR_IR069_STORMEVENTS_2018_1101_1130.h5"
        )
        return pd.concat([catalog, satellite], ignore_index=True)

    edit_catalog(root_copy, add_satellite_row)
    assert (read_catalog(root_copy).img_type == "ir069").sum() == 1
    assert open_sevir(root_copy).sizes["event"] == EVENTS
    with pytest.raises(DataError, match=r"line 7 \(id S700000\): data file .*IR069.* not found"):
        open_sevir(root_copy, img_type="ir069")


def test_catalog_is_filtered_by_date_and_missing_fraction(root_copy: Path) -> None:
    times = pd.to_datetime(catalog_rows(root_copy).time_utc)
    val = open_sevir(root_copy, start="2019-01-01", end="2019-06-01")
    assert val.sizes["event"] == 2
    assert all(VAL_START < time <= TEST_START for time in pd.DatetimeIndex(val.time_utc.values))
    # as Earthformer's loader: time_utc > start and time_utc <= end
    chosen = open_sevir(root_copy, start=times[1], end=times[3].to_pydatetime())
    assert chosen.event.values.tolist() == ["S700002", "S700003"]

    edit_catalog(root_copy, lambda catalog: catalog.assign(pct_missing=[0, 0.5, 0, 0, 0]))
    assert "S700001" not in open_sevir(root_copy).event.values
    assert open_sevir(root_copy, max_missing=0.5).sizes["event"] == EVENTS


def test_an_id_listed_twice_is_dropped_with_every_row_as_earthformer_does(
    root_copy: Path,
) -> None:
    edit_catalog(root_copy, lambda catalog: pd.concat([catalog, catalog.iloc[[1]]]))
    events = open_sevir(root_copy).event.values.tolist()
    assert events == ["S700000", "S700002", "S700003", "S700004"]
    # a second row that the filters remove leaves the id unique, so it stays
    edit_catalog(root_copy, lambda catalog: catalog.assign(pct_missing=[0, 0, 0, 0, 0, 0.5]))
    assert "S700001" in open_sevir(root_copy).event.values


def test_only_the_columns_used_are_required(root_copy: Path) -> None:
    def used_columns_and_an_extra_one(catalog: pd.DataFrame) -> pd.DataFrame:
        return catalog[list(REQUIRED_COLUMNS)].assign(note="extra", minute_offsets="-5:0:5")

    expected = open_sevir(root_copy).vil[1].values
    edit_catalog(root_copy, used_columns_and_an_extra_one)
    ds = open_sevir(root_copy)
    assert ds.sizes["event"] == EVENTS and np.isnan(ds.llcrnrlat.values).all()
    np.testing.assert_array_equal(ds.vil[1].values, expected)


# --- SEVIR-LR and windows ------------------------------------------------------------------------


def write_sevir_lr_files(sevir_root: Path, out: Path) -> Path:
    """A copy of the root in the layout of PreDiff's released SEVIR-LR: the same catalog, each
    file holding only `vil` (N × 128 × 128 × 25), pooled here with NumPy, and no `id`."""
    shutil.copy(sevir_root / "CATALOG.csv", out / "CATALOG.csv")
    for source in (sevir_root / "data").rglob("*.h5"):
        with h5py.File(source, "r") as file:
            raw = file["vil"][:][..., ::2]  # N, 384, 384, 25 (h5py's strided reads are slow)
        pooled = raw.reshape(len(raw), 128, 3, 128, 3, 25).max(axis=(2, 4))
        target = out / source.relative_to(sevir_root)
        target.parent.mkdir(parents=True, exist_ok=True)
        with h5py.File(target, "w") as file:
            file.create_dataset("vil", data=pooled, chunks=(1, 128, 128, 25), compression="lzf")
    return out


@pytest.fixture(scope="module")
def sevir_lr_root(sevir_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sevir_lr_files(sevir_root, tmp_path_factory.mktemp("sevir-lr"))


def test_released_sevir_lr_files_read_as_the_pooled_original(
    sevir_root: Path, sevir_lr_root: Path, windows: xr.Dataset, tmp_path: Path
) -> None:
    lr_root = sevir_lr_root
    released = open_sevir(lr_root)
    assert released.attrs["layout"] == "sevir-lr" and released.attrs["frame_minutes"] == 10
    assert released.vil.shape == (EVENTS, 25, 128, 128)
    assert released.time.values.tolist() == list(range(-120, 121, 10))
    assert open_sevir(sevir_root).attrs["layout"] == "sevir"
    xr.testing.assert_equal(sevir_windows(to_sevir_lr(released)).load(), windows)
    stored = read_windows(prepare_sevir_lr(lr_root, tmp_path / "lr.zarr", progress=False))
    xr.testing.assert_equal(stored.drop_vars("split").load(), windows)


def test_a_root_mixing_layouts_or_a_short_file_is_refused(
    sevir_lr_root: Path, root_copy: Path
) -> None:
    name = first_file(root_copy)
    shutil.copy(sevir_lr_root / "data" / name, root_copy / "data" / name)
    with pytest.raises(DataError, match=r"has the sevir(-lr)? layout but .* a root holds one"):
        open_sevir(root_copy)
    rewrite_file(root_copy, name, vil=np.zeros((1, 128, 128, 24), np.uint8))
    with pytest.raises(DataError, match=r"expected \(N, 384, 384, 49\) or \(N, 128, 128, 25\)"):
        open_sevir(root_copy)


def test_sevir_lr_keeps_every_second_frame_and_max_pools_3x3(sevir_root: Path) -> None:
    lr = to_sevir_lr(open_sevir(sevir_root))
    assert isinstance(lr.vil.data, da.Array)
    assert lr.vil.shape == (EVENTS, 25, 128, 128) and lr.vil.dtype == np.uint8
    assert lr.time.values.tolist() == list(range(-120, 121, 10))
    raw = raw_event(sevir_root, catalog_rows(sevir_root).iloc[2])
    pooled = lr.vil[2].values
    rng = np.random.default_rng(0)
    peak = np.unravel_index(np.argmax(pooled), pooled.shape)
    blocks = [peak, *zip(*(rng.integers(0, n, 200) for n in pooled.shape), strict=True)]
    for frame, i, j in blocks:
        block = raw[2 * frame, 3 * i : 3 * i + 3, 3 * j : 3 * j + 3]
        assert pooled[frame, i, j] == block.max(), (frame, i, j)
    assert pooled[peak] > 100


def test_windows_are_13_frames_every_6_as_the_reference_configs(
    sevir_root: Path, windows: xr.Dataset
) -> None:
    lr = to_sevir_lr(open_sevir(sevir_root)).load()
    assert windows.vil.dims == ("window", "time", "y", "x")
    assert windows.vil.shape == (3 * EVENTS, 13, 128, 128)  # starts 0, 6, 12 of 25 frames
    assert windows.attrs["stride"] == 6
    assert windows.time.values.tolist() == list(range(-60, 61, 10))
    assert windows.event.values.tolist() == [event for event in lr.event.values for _ in range(3)]
    for window in (0, 4, 8):
        event, start = window // 3, 6 * (window % 3)
        np.testing.assert_array_equal(windows.vil[window], lr.vil[event, start : start + 13])
        offset = np.timedelta64(-120 + 10 * start, "m")
        assert windows.start_utc.values[window] == lr.time_utc.values[event] + offset
        assert windows.time_utc.values[window] == lr.time_utc.values[event]
    assert sevir_windows(lr, stride=12).sizes["window"] == 2 * EVENTS  # starts 0, 12


def timed_windows(times: list[str], per_event: int = 1) -> xr.Dataset:
    """Windows of one event per time (ids E0, E1, …), `per_event` windows each."""
    events = [f"E{index}" for index, _ in enumerate(times) for _ in range(per_event)]
    stamps = pd.DatetimeIndex([time for time in times for _ in range(per_event)])
    return xr.Dataset(coords={"event": ("window", events), "time_utc": ("window", stamps)})


def test_earthformer_split_cuts_after_each_date_as_its_loader() -> None:
    times = [
        "2018-12-31 23:59:59",
        "2019-01-01 00:00:00",  # ≤ 2019-01-01: still train
        "2019-01-01 00:05:00",
        "2019-06-01 00:00:00",  # ≤ 2019-06-01: still val
        "2019-06-01 00:05:00",
        "2019-09-01 12:00:00",
    ]
    windows = timed_windows(times)
    expected = ["train", "train", "val", "val", "test", "test"]
    assert split_windows(windows).tolist() == expected
    bounded = SplitSettings(start="2019-01-01", end="2019-06-01 00:05")
    assert split_windows(windows, bounded).tolist() == ["", "", "val", "val", "test", ""]
    with pytest.raises(SettingsError, match="split 'random' is not a protocol"):
        SplitSettings("random")
    with pytest.raises(SettingsError, match="end date 'soon' is not a date"):
        SplitSettings(end="soon")


def prediff_validation_restated(windows: xr.Dataset, per_event: int, seed: int) -> set:
    """(event, window number) of PreDiff's validation windows, restated from its data module:
    Earthformer's SEVIRDataLoader lists the ids of the rows up to 2019-06-01 (groupby sorts
    them), shuffles them with random_state 1 when it lists them and again at reset; its sample
    i is window i % per_event of event i // per_event; random_split draws 10 % of the samples."""
    frame = windows.to_dataframe().reset_index()
    frame = frame[frame.time_utc <= TEST_START]
    samples = frame.groupby("event").size().to_frame("windows")
    samples = samples.sample(frac=1, random_state=1).sample(frac=1, random_state=1)
    count = len(samples) * per_event
    generator = torch.Generator().manual_seed(seed)
    _, val = torch.utils.data.random_split(range(count), [0.9, 0.1], generator=generator)
    return {(samples.index[i // per_event], i % per_event) for i in val.indices}


@pytest.mark.parametrize("seed", [0, 3])
def test_prediff_split_draws_validation_as_its_data_module(seed: int) -> None:
    times = pd.date_range("2018-03-01", "2019-09-01", periods=24).astype(str).tolist()
    windows = timed_windows(times, per_event=3)
    splits = split_windows(windows, SplitSettings("prediff", seed=seed))
    events = windows.event.values
    numbers = [position % 3 for position in range(events.size)]
    drawn = {(events[i], numbers[i]) for i in np.flatnonzero(splits == "val")}
    assert drawn == prediff_validation_restated(windows, 3, seed)
    before = pd.DatetimeIndex(windows.time_utc.values) <= TEST_START
    assert len(drawn) == (before.sum() - int(before.sum() * 0.9))  # random_split's lengths
    assert set(splits[before]) == {"train", "val"} and set(splits[~before]) == {"test"}
    assert "val" in splits[pd.DatetimeIndex(windows.time_utc.values) < VAL_START]  # no Jan-1 cut


def test_windows_reject_a_length_longer_than_the_event(sevir_root: Path) -> None:
    with pytest.raises(DataError, match="do not fit events of 25 frames"):
        sevir_windows(to_sevir_lr(open_sevir(sevir_root)), inputs=20, outputs=6)


# --- bad inputs ----------------------------------------------------------------------------------


def first_file(root: Path) -> str:
    return catalog_rows(root).file_name[0]


def remove_catalog(root: Path) -> None:
    (root / "CATALOG.csv").unlink()


def drop_column(root: Path) -> None:
    edit_catalog(root, lambda catalog: catalog.drop(columns=["pct_missing"]))


def remove_file(root: Path) -> None:
    (root / "data" / first_file(root)).unlink()


def index_out_of_range(root: Path) -> None:
    edit_catalog(root, lambda catalog: catalog.assign(file_index=[99, 0, 0, 0, 0]))


def mismatched_id(root: Path) -> None:
    edit_catalog(root, lambda catalog: catalog.replace({"id": {"S700000": "S123456"}}))


def no_vil_dataset(root: Path) -> None:
    rewrite_file(root, first_file(root), id=np.array([b"S700000"]))


def wrong_frame_shape(root: Path) -> None:
    frames = np.zeros((1, 192, 192, 49), np.uint8)
    rewrite_file(root, first_file(root), id=np.array([b"S700000"]), vil=frames)


def values_out_of_range(root: Path) -> None:
    frames = np.zeros((1, 384, 384, 49), np.int16)
    frames[0, 5, 5, 5] = 300
    rewrite_file(root, first_file(root), id=np.array([b"S700000"]), vil=frames)


def bad_time(root: Path) -> None:
    edit_catalog(
        root, lambda catalog: catalog.assign(time_utc=["yesterday", *catalog.time_utc[1:]])
    )


BREAKERS = {
    "missing catalog": (remove_catalog, r"CATALOG\.csv: not found"),
    "missing column": (drop_column, r"missing column\(s\) pct_missing"),
    "missing file": (remove_file, r"line 2 \(id S700000\): data file .*_1201_1215\.h5 not found"),
    "index out of range": (index_out_of_range, r"file_index 99 is out of range .* holds 1 events"),
    "id mismatch": (mismatched_id, r"has id 'S700000' at index 0, expected 'S123456'"),
    "no vil dataset": (no_vil_dataset, r"_1201_1215\.h5: no dataset 'vil' \(found \['id'\]\)"),
    "wrong shape": (wrong_frame_shape, r"'vil' has shape \(1, 192, 192, 49\), expected \(N, 384"),
    "values out of range": (values_out_of_range, r"int16\) row 0 has values from 0.0 to 300.0"),
    "unparsable time": (bad_time, r"line 2: time_utc = 'yesterday', expected a time"),
}


@pytest.mark.parametrize("problem", BREAKERS)
def test_bad_sevir_input_raises_a_data_error_naming_it(root_copy: Path, problem: str) -> None:
    breaker, message = BREAKERS[problem]
    breaker(root_copy)
    with pytest.raises(DataError, match=message) as raised:
        open_sevir(root_copy)
    assert "\n" not in str(raised.value)


def test_non_uint8_values_within_range_are_accepted(root_copy: Path) -> None:
    frames = np.zeros((1, 384, 384, 49), np.float32)
    frames[0, 7, 8, 9] = 254.6
    rewrite_file(root_copy, first_file(root_copy), id=np.array([b"S700000"]), vil=frames)
    vil = open_sevir(root_copy).vil[0].values
    assert vil.dtype == np.uint8 and vil[9, 7, 8] == 255 and vil.sum() == 255


def test_empty_date_range_raises(sevir_root: Path) -> None:
    with pytest.raises(
        DataError, match=r"no vil events .* after 2030-01-01 00:00:00 up to the last"
    ):
        open_sevir(sevir_root, start="2030-01-01")


def test_store_of_another_schema_raises(tmp_path: Path) -> None:
    other = tmp_path / "other.zarr"
    xr.Dataset({"vil": (("window",), np.zeros(2, np.uint8))}, attrs={"schema": "x/0"}).to_zarr(
        other, consolidated=False
    )
    with pytest.raises(DataError, match=rf"other\.zarr: schema 'x/0' found, expected '{SCHEMA}'"):
        read_windows(other)
    with pytest.raises(DataError, match=r"neither a SEVIR folder with CATALOG\.csv nor a prepared"):
        open_prepared(tmp_path)


# --- prepared stores -----------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".zarr", ".nc"])
def test_prepare_round_trips_the_windows(
    sevir_root: Path, windows: xr.Dataset, tmp_path: Path, suffix: str
) -> None:
    out = prepare_sevir_lr(sevir_root, tmp_path / f"windows{suffix}", progress=False)
    stored = read_windows(out)
    assert stored.attrs["schema"] == SCHEMA
    assert (stored.attrs["inputs"], stored.attrs["outputs"]) == (7, 6)
    assert stored.attrs["source"] == str(sevir_root.resolve())
    assert stored.vil.data.chunks[0] == (1,) * stored.sizes["window"]  # one window per chunk
    xr.testing.assert_equal(stored.drop_vars("split").load(), windows)
    expected_hash = hashlib.sha256(windows.vil.values.tobytes()).hexdigest()
    assert stored.attrs["content_sha256"] == expected_hash
    size = sum(path.stat().st_size for path in [out, *out.rglob("*")] if path.is_file())
    assert size < windows.vil.nbytes / 2  # compressed
    test_windows = stored.vil.where(stored.split == "test", drop=True)
    assert test_windows.sizes["window"] == 6


def test_failed_prepare_leaves_nothing_and_keeps_an_older_store(
    sevir_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail_after_one_event(events, **_):
        yield next(iter(events))
        raise RuntimeError("interrupted")

    monkeypatch.setattr(store_module, "tqdm", fail_after_one_event)
    out = tmp_path / "windows.zarr"
    with pytest.raises(RuntimeError, match="interrupted"):
        prepare_sevir_lr(sevir_root, out, progress=False)
    assert list(tmp_path.iterdir()) == []

    monkeypatch.undo()
    prepare_sevir_lr(sevir_root, out, progress=False)
    monkeypatch.setattr(store_module, "tqdm", fail_after_one_event)
    with pytest.raises(RuntimeError):
        prepare_sevir_lr(sevir_root, out, progress=False)
    assert list(tmp_path.iterdir()) == [out]
    assert read_windows(out).sizes["window"] == 3 * EVENTS


def test_open_prepared_prepares_once_and_again_when_the_catalog_changes(
    root_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = open_prepared(root_copy)
    assert (root_copy / "sevir_lr.zarr").is_dir() and first.sizes["window"] == 3 * EVENTS

    def refuse(*args, **kwargs):
        raise AssertionError("prepared again")

    monkeypatch.setattr(store_module, "prepare_sevir_lr", refuse)
    again = open_prepared(root_copy)
    assert again.attrs["content_sha256"] == first.attrs["content_sha256"]
    assert open_prepared(root_copy / "sevir_lr.zarr").sizes["window"] == 3 * EVENTS

    monkeypatch.undo()
    edit_catalog(root_copy, lambda catalog: catalog.iloc[:-1])
    assert open_prepared(root_copy).sizes["window"] == 3 * (EVENTS - 1)


def test_nowcast_windows_open_the_prepared_store(sevir_root: Path, tmp_path: Path) -> None:
    from spanlift.backbones.nowcast_windows import NowcastWindows

    out = prepare_sevir_lr(sevir_root, tmp_path / "windows.nc", progress=False)
    nowcast = NowcastWindows.open(out, grid=32)
    assert tuple(nowcast.train.shape) == (3, 13, 32, 32)
    assert tuple(nowcast.test.shape) == (6, 13, 32, 32)


# --- synthetic SEVIR -----------------------------------------------------------------------------


def test_synthetic_catalog_has_the_sevir_layout(sevir_root: Path) -> None:
    catalog = catalog_rows(sevir_root)
    assert tuple(catalog.columns) == CATALOG_COLUMNS
    assert set(catalog.img_type) == {"vil"} and (catalog.pct_missing == 0).all()
    assert catalog.file_name[0] == "vil/2018/SEVIR_VIL_STORMEVENTS_2018_1201_1215.h5"
    assert (catalog.size_x == 384).all() and (catalog.height_m == 384000).all()
    with h5py.File(sevir_root / "data" / catalog.file_name[0], "r") as file:
        assert file["id"].dtype.kind == "S" and file["id"][0] == b"S700000"
        assert file["vil"].compression == "gzip" and file["vil"].chunks == (1, 384, 384, 49)
    row = catalog.iloc[0]
    frames = raw_event(sevir_root, row)
    assert (row.data_min, row.data_max) == (frames.min(), frames.max())


def test_default_synthetic_times_cover_every_split() -> None:
    times = event_times("2018-01-01", "2019-12-31", 64)
    counts = pd.Series(split_windows(timed_windows([str(time) for time in times]))).value_counts()
    assert counts["test"] >= 8 and counts["val"] >= 1 and counts["train"] >= 8


def test_synthetic_storms_are_plausible() -> None:
    frames = storm_frames(np.random.default_rng([0, 3])).astype(int)
    assert frames.shape == (49, 384, 384)
    assert (frames < 16).mean() > 0.7  # mostly no storm (VIL below the lowest threshold)
    assert 150 <= frames.max() <= 255  # convective cores
    assert (frames.reshape(49, -1).max(axis=1) > 0).all()


def test_synthetic_sevir_is_deterministic_per_seed(tmp_path: Path) -> None:
    def write(name: str, seed: int) -> Path:
        out = tmp_path / name
        return write_synthetic_sevir(out, events=2, seed=seed, start=START, end=END, progress=False)

    first, same, other = write("a", 0), write("b", 0), write("c", 1)
    files = sorted(path.relative_to(first) for path in first.rglob("*") if path.is_file())
    for relative in files:
        assert (first / relative).read_bytes() == (same / relative).read_bytes(), relative
    rows = catalog_rows(first)
    assert rows.equals(catalog_rows(same))
    assert not rows.equals(catalog_rows(other))
    assert not np.array_equal(raw_event(first, rows.iloc[0]), raw_event(other, rows.iloc[0]))
    with pytest.raises(DataError, match="exists and is not empty"):
        write("a", 1)  # the same settings keep the folder (the test below); others are refused


def test_synthetic_sevir_written_again_with_the_same_settings_is_kept(tmp_path: Path) -> None:
    root = write_synthetic_sevir(tmp_path / "synth", events=2, progress=False)
    catalog = (root / "CATALOG.csv").stat().st_mtime_ns
    assert write_synthetic_sevir(tmp_path / "synth", events=2, progress=False) == root
    assert (root / "CATALOG.csv").stat().st_mtime_ns == catalog  # kept, not written again
    with pytest.raises(DataError, match="exists and is not empty"):
        write_synthetic_sevir(tmp_path / "synth", events=3, progress=False)
