"""The teacher cache's file and its reading: the read maps the entry instead of copying it into
each process, processes on one node share its pages, and every column, every kind of entry and
entries of the earlier Parquet layout read back equal and verified."""

import hashlib
import json
import sys
import tracemalloc
import warnings

import pytest
import torch

from spanlift.errors import CacheError
from spanlift.files import file_sha256
from spanlift.platform.configuration import digest
from spanlift.platform.fitting.compare import set_digest
from spanlift.platform.sampling.teacher import OPTIONAL, TeacherSet, read_teacher, write_teacher
from spanlift.solvers import SolverSpec

from .teacher_entries import read_in_fresh_process, read_together, write_parquet_entry

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads memory figures from /proc"
)

LARGE = (2400, (3, 64, 64))
"""Seeds and sample shape of the large entry: 236 MB of noise and endpoints."""


def random_set(count: int, shape: tuple[int, ...], seed: int = 0, **optional) -> TeacherSet:
    generator = torch.Generator().manual_seed(seed)
    noise, endpoints = (torch.randn(count, *shape, generator=generator) for _ in range(2))
    return TeacherSet(torch.arange(count) + 10 * seed, noise, endpoints, f"set{seed}", **optional)


def set_bytes(teacher: TeacherSet) -> int:
    tensors = (teacher.seeds, teacher.noise, teacher.endpoints, teacher.cond, teacher.states)
    return sum(t.nbytes for t in tensors if t is not None)


@pytest.fixture(scope="module")
def large_entry(tmp_path_factory):
    """(folder, bytes of data) of an entry of a few hundred MB."""
    teacher = random_set(*LARGE)
    folder = write_teacher(tmp_path_factory.mktemp("large") / "teacher-large", teacher, {})
    return folder, set_bytes(teacher)


@linux_only
def test_the_teacher_read_does_not_copy_per_process(large_entry):
    """Reading maps the file: the resident set barely grows until values are read, and reading
    every value adds the data once (file pages), never a second copy."""
    folder, data = large_entry
    report = read_in_fresh_process(folder)
    read, touched = report["read"], report["touched"]
    assert read["peak"] <= 0.1 * data, f"read peak {read['peak'] / data:.2f}× the data"
    assert touched["peak"] <= 1.1 * data, f"peak {touched['peak'] / data:.2f}× the data"
    assert touched["rss"] >= 0.9 * data  # the values were read, and RSS counts them


@linux_only
def test_processes_reading_one_entry_share_its_pages(large_entry):
    """Two processes that read and touched the same entry each hold it (RSS ~1×) but own almost
    none of it: the pages are the page cache's, mapped by both."""
    folder, data = large_entry
    grown = read_together(folder, 2)
    for each in grown:
        assert each["rss"] >= 0.9 * data
        assert each["private"] <= 0.1 * data, f"private {each['private'] / data:.2f}× the data"


def kinds_of_entry() -> dict[str, TeacherSet]:
    """An endpoint entry, a conditional one (conditioning and observations) and a trajectory
    one (states at two σ), small."""
    shape = (1, 4, 4)
    generator = torch.Generator().manual_seed(7)
    return {
        "endpoint": random_set(20, shape, teacher=SolverSpec("euler", 8)),
        "conditional": random_set(
            20,
            shape,
            seed=1,
            cond=torch.randn(20, 3, 4, 4, generator=generator),
            observed=torch.randn(20, *shape, generator=generator),
        ),
        "trajectory": random_set(
            20,
            shape,
            seed=2,
            states=torch.randn(20, 2, *shape, generator=generator),
            state_sigmas=(2.5, 0.5),
        ),
    }


def assert_same_set(read: TeacherSet, written: TeacherSet) -> None:
    assert read.key == written.key and len(read) == len(written)
    assert read.teacher == written.teacher and read.state_sigmas == written.state_sigmas
    for name in ("seeds", "noise", "endpoints", *OPTIONAL):
        got, want = getattr(read, name), getattr(written, name)
        assert (got is None) == (want is None), name
        if want is not None:
            assert got.dtype == want.dtype and torch.equal(got, want), name


@pytest.mark.parametrize("kind", ["endpoint", "conditional", "trajectory"])
def test_every_column_of_every_kind_of_entry_reads_back_equal(kind, tmp_path):
    written = kinds_of_entry()[kind]
    folder = write_teacher(tmp_path / "teacher-x", written, {})
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "teacher.arrow"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns about views of read-only memory
        read = read_teacher(folder)
    assert_same_set(read, written)


def test_writing_into_a_read_set_never_changes_the_file(tmp_path):
    written = kinds_of_entry()["trajectory"]
    folder = write_teacher(tmp_path / "teacher-x", written, {})
    before = file_sha256(folder / "teacher.arrow")
    read = read_teacher(folder)
    for name in ("seeds", "noise", "endpoints", "states"):
        getattr(read, name).zero_()
    assert file_sha256(folder / "teacher.arrow") == before
    assert_same_set(read_teacher(folder), written)


@pytest.mark.parametrize("layout", ["arrow", "parquet"])
def test_an_entry_of_either_layout_that_changed_or_lost_a_file_is_refused(layout, tmp_path):
    written = kinds_of_entry()["conditional"]
    folder = tmp_path / "teacher-x"
    if layout == "arrow":
        write_teacher(folder, written, {})
    else:
        write_parquet_entry(folder, written, rows=8)
    name = {"arrow": "teacher.arrow", "parquet": "part-00001.parquet"}[layout]
    data = bytearray((folder / name).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (folder / name).write_bytes(bytes(data))
    refused(folder, rf"{name} is corrupt \(checksum mismatch\); delete .*teacher-x$")
    (folder / name).unlink()
    refused(folder, rf"{name} is missing; delete .*teacher-x$")


def refused(folder, message: str) -> None:
    with pytest.raises(CacheError, match=message) as caught:
        read_teacher(folder)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("kind", ["endpoint", "conditional", "trajectory"])
def test_an_entry_of_the_parquet_layout_still_reads_equal(kind, tmp_path):
    written = kinds_of_entry()[kind]
    folder = write_parquet_entry(tmp_path / "teacher-x", written, rows=8)
    assert len(list(folder.glob("part-*.parquet"))) == 3
    assert_same_set(read_teacher(folder), written)


def test_an_entry_this_version_cannot_read_is_refused_in_one_line(tmp_path):
    folder = write_teacher(tmp_path / "teacher-x", kinds_of_entry()["endpoint"], {})
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "layout": "zarr"}))
    refused(folder, r"has the layout 'zarr', which this version .* delete the folder$")
    (folder / "teacher.arrow").write_bytes(b"not an Arrow file")
    files = {"teacher.arrow": file_sha256(folder / "teacher.arrow")}
    (folder / "manifest.json").write_text(json.dumps({**manifest, "files": files}))
    refused(folder, r"teacher-x cannot be read \(.*\); delete the folder$")


def test_a_sets_digest_reads_its_endpoints_without_copying_them():
    """`set_digest` hashes the endpoints in place, to the digest fit keys already stored hold."""
    teacher = random_set(200, (3, 64, 64))
    tracemalloc.start()
    try:
        identity = set_digest(teacher)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    size = teacher.endpoints.nbytes
    assert peak <= 0.01 * size, f"set_digest allocated {peak / size:.2f}× the endpoints"
    stored = hashlib.sha256(teacher.endpoints.numpy().tobytes()).hexdigest()
    assert identity == digest([teacher.key, stored])
