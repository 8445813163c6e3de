"""Sweep storage in a bucket: a real S3 API (moto's server on 127.0.0.1), read back through a
second node's empty mirror, and every unusable storage refused in one line."""

from pathlib import Path

import pytest
import torch

from spanlift.errors import CacheError, SettingsError
from spanlift.platform.results.fit_cache import FitCache
from spanlift.platform.sampling.teacher import read_teacher, write_teacher
from spanlift.platform.storage import BucketStorage, check_storage, open_storage
from tests.s3_server import keys, make_bucket, moto_server, s3_environment


@pytest.fixture(scope="module")
def s3() -> str:
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def s3_env(s3: str, monkeypatch: pytest.MonkeyPatch) -> str:
    for name, value in s3_environment(s3).items():
        monkeypatch.setenv(name, value)
    return s3


def on_another_node(storage: BucketStorage, mirror: Path) -> BucketStorage:
    """The same bucket as a node whose mirror is `mirror` (empty) sees it."""
    return BucketStorage(storage.uri, storage.filesystem, storage.base, mirror)


def test_a_teacher_entry_published_by_one_node_is_read_verified_by_another(
    s3_env: str, tmp_path: Path, gmm_teacher
) -> None:
    bucket = make_bucket(s3_env, "teachers")
    here = open_storage("s3://teachers/runs").child("exp")
    here = on_another_node(here, tmp_path / "node-a")
    entry = write_teacher(here.local / "teacher-x", gmm_teacher[1], {"note": "test"})
    assert not here.exists(entry)
    here.publish(entry)
    assert here.exists(entry)
    stored = keys(bucket, "teachers/runs/exp")
    assert {"teacher-x/manifest.json", "teacher-x/teacher.arrow"} <= set(stored)

    there = on_another_node(here, tmp_path / "node-b")
    copy = there.local / "teacher-x"
    assert there.fetch(copy)
    assert torch.equal(read_teacher(copy).endpoints, gmm_teacher[1].endpoints)

    # a file changed in the bucket is caught by the manifest's checksum after the fetch
    with bucket.open_output_stream("teachers/runs/exp/teacher-x/teacher.arrow") as handle:
        handle.write(b"not arrow")
    third = on_another_node(here, tmp_path / "node-c")
    assert third.fetch(third.local / "teacher-x")
    with pytest.raises(CacheError, match="checksum mismatch"):
        read_teacher(third.local / "teacher-x")


def test_a_fitted_checkpoint_is_found_in_the_bucket_not_refitted(
    s3_env: str, tmp_path: Path
) -> None:
    make_bucket(s3_env, "fits")
    storage = on_another_node(open_storage("s3://fits/p"), tmp_path / "a")
    folder = storage.local / "fitted"
    checkpoint = folder / "solver.pt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"weights")
    storage.publish(checkpoint)
    other = on_another_node(storage, tmp_path / "b")
    cache = FitCache(other.local / "fitted", template=None, storage=other)  # type: ignore[arg-type]
    assert cache.present(other.local / "fitted" / "solver.pt")
    assert (other.local / "fitted" / "solver.pt").read_bytes() == b"weights"
    assert not cache.present(other.local / "fitted" / "absent.pt")
    assert other.names(other.local / "fitted") == ["solver.pt"]


def test_ray_is_given_the_buckets_file_system(s3_env: str) -> None:
    make_bucket(s3_env, "ray")
    storage = open_storage("s3://ray/sweeps/").child("exp")
    where = storage.ray_storage("train")
    assert where["storage_path"] == "ray/sweeps/exp/train"
    assert where["storage_filesystem"] is storage.filesystem
    assert storage.ray_storage()["storage_path"] == "ray/sweeps/exp"


def test_a_folder_storage_is_the_folder_itself(tmp_path: Path) -> None:
    storage = open_storage(str(tmp_path / "runs")).child("exp")
    assert not storage.remote and storage.local == tmp_path / "runs" / "exp"
    assert storage.ray_storage("tune") == {"storage_path": str(tmp_path / "runs" / "exp" / "tune")}


@pytest.mark.parametrize(
    ("storage", "message"),
    [
        ("ftp://host/runs", "ftp:// cannot be written"),
        ("file:///tmp/x", "file:// cannot be written"),
        ("s3://", "names no bucket"),
        ("gs:///prefix", "names no bucket"),
    ],
)
def test_uris_the_product_cannot_write_are_refused(storage: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        check_storage(storage)


def test_a_missing_bucket_is_refused_and_nothing_is_written(s3_env: str) -> None:
    bucket = make_bucket(s3_env, "present")
    with pytest.raises(SettingsError, match="the bucket 'absent' does not exist"):
        open_storage("s3://absent/runs")
    assert keys(bucket, "present") == []


def test_an_unreachable_endpoint_is_refused_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.s3_server import free_port

    for name, value in s3_environment(f"http://127.0.0.1:{free_port()}").items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=r"the S3 endpoint .* cannot be reached"):
        open_storage("s3://bucket/runs")


def test_credentials_the_store_refuses_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    with moto_server(auth=True) as endpoint:
        for name, value in s3_environment(endpoint).items():
            monkeypatch.setenv(name, value)
        with pytest.raises(SettingsError, match="access denied: check the credentials"):
            open_storage("s3://bucket/runs")


def test_doctor_finds_a_bucket_writable(s3_env: str) -> None:
    from spanlift.platform.doctor.environment import storage_check

    bucket = make_bucket(s3_env, "doctor")
    assert storage_check("s3://doctor/runs", None) == "s3://doctor/runs is writable"
    assert keys(bucket, "doctor") == []  # the probe object is removed


def test_a_folder_another_process_changed_is_refreshed_and_can_be_removed(
    s3_env: str, tmp_path: Path
) -> None:
    bucket = make_bucket(s3_env, "state")
    storage = on_another_node(open_storage("s3://state/p"), tmp_path / "a")
    state = storage.local / "tune"
    (state / "trial").mkdir(parents=True)
    (state / "trial" / "result.json").write_text("{}")
    storage.publish(state)
    other = on_another_node(storage, tmp_path / "b")
    (other.local / "tune").mkdir(parents=True)
    (other.local / "tune" / "stale.json").write_text("old")
    other.refresh(other.local / "tune")
    assert sorted(p.name for p in (other.local / "tune").rglob("*")) == ["result.json", "trial"]
    other.remove(other.local / "tune")
    assert keys(bucket, "state/p") == []
    other.refresh(other.local / "tune")
    assert not (other.local / "tune").exists()


def test_a_sweep_in_a_bucket_is_protected_and_restarted_through_the_bucket(
    s3_env: str, tmp_path: Path
) -> None:
    """Another machine's Tune state in the bucket is seen before anything runs: protected
    without a flag, deleted from the bucket by --restart; the validated sweep is published."""
    from spanlift.platform.sweep.config import parse_sweep
    from spanlift.platform.sweep.driver import sync_sweep_state

    bucket = make_bucket(s3_env, "sweeps")
    config = parse_sweep(
        {"experiment": "e", "backbone": "gmm", "solvers": [{"name": "euler", "nfe": 3}]}, "s.yaml"
    )
    elsewhere = on_another_node(open_storage("s3://sweeps/runs").child("e"), tmp_path / "a")
    (elsewhere.local / "tune").mkdir(parents=True)
    (elsewhere.local / "tune" / "tuner.pkl").write_bytes(b"state")
    elsewhere.publish(elsewhere.local / "tune")
    here = on_another_node(elsewhere, tmp_path / "b")
    with pytest.raises(SettingsError, match="this sweep already ran"):
        sync_sweep_state(here, config, resume=False, restart=False)
    sync_sweep_state(here, config, resume=False, restart=True)
    assert keys(bucket, "sweeps/runs/e") == ["sweep.yaml"]
