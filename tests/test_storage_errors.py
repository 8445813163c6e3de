"""A bucket that cannot be used (missing, credentials refused, a storage service that does not
answer, a file system pyarrow lacks) is one line naming the URI and what to check, exit status 2,
within the storage timeout: never a traceback, never minutes of the clients' retries."""

import ast
import importlib
import inspect
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pyarrow.lib
import pytest

from spanlift.errors import SettingsError
from spanlift.platform.doctor.environment import storage_check
from spanlift.platform.doctor.report import checked
from tests.cli_run import ROOT, spanlift
from tests.s3_server import free_port, make_bucket, moto_server, s3_environment

TIMEOUT_S = 2
"""The storage timeout these tests set ($SPANLIFT_STORAGE_TIMEOUT)."""
STARTUP_S = 40
"""What `spanlift sweep` may take besides the storage check on a loaded machine (Python, torch,
the sweep file); the clients' own retries, unbounded, take minutes."""


def caught_names(module: object) -> list[str]:
    """The source of every exception type an `except` clause of `module` names."""
    tree = ast.parse(inspect.getsource(module))
    return [
        ast.unparse(node.type)
        for node in ast.walk(tree)
        if isinstance(node, ast.ExceptHandler) and node.type is not None
    ]


@pytest.mark.parametrize("name", ["spanlift.platform.storage", "spanlift.platform.bucket_probe"])
def test_every_exception_the_storage_code_catches_exists(name: str) -> None:
    """An `except` clause's names are looked up only when an exception reaches it: a name the
    installed pyarrow lacks turned every storage error into an AttributeError."""
    module = importlib.import_module(name)
    names = caught_names(module)
    assert names, f"{module} catches nothing: the check looks at the wrong module"
    for source in names:
        caught = eval(source, vars(module))
        for kind in caught if isinstance(caught, tuple) else (caught,):
            assert isinstance(kind, type) and issubclass(kind, BaseException), source


def test_the_errors_of_every_storage_call_are_caught() -> None:
    """What pyarrow raises: OSError (its ArrowIOError), ArrowInvalid (a ValueError), and
    ArrowNotImplementedError (a file system this pyarrow was built without)."""
    from spanlift.platform.bucket_probe import STORAGE_ERRORS

    for kind in (pyarrow.lib.ArrowIOError, pyarrow.lib.ArrowInvalid):
        assert issubclass(kind, STORAGE_ERRORS)
    assert issubclass(pyarrow.lib.ArrowNotImplementedError, STORAGE_ERRORS)


def test_a_file_system_pyarrow_lacks_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a pyarrow built without GCS raises for gs:// (pyarrow's classes cannot be patched:
    the module's `pafs` is)."""
    from spanlift.platform import bucket_probe

    def without_gcs(uri: str) -> None:
        raise pyarrow.lib.ArrowNotImplementedError("Got GCS URI but Arrow compiled without GCS")

    built = SimpleNamespace(FileSystem=SimpleNamespace(from_uri=without_gcs))
    monkeypatch.setattr(bucket_probe, "pafs", built)
    with pytest.raises(SettingsError, match=r"storage gs://b/p: this pyarrow .* without"):
        bucket_probe.bucket_filesystem("gs://b/p")


def one_line(result) -> str:
    """The one line a refused command printed on standard error."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.e2e
def test_a_missing_bucket_is_one_plain_line_for_sweep_and_doctor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with moto_server() as endpoint:
        for name, value in s3_environment(endpoint).items():
            monkeypatch.setenv(name, value)
        make_bucket(endpoint, "present")
        uri = "s3://no-such-bucket/p"
        outcome = checked("storage", lambda: storage_check(uri, None))
        swept = spanlift(tmp_path, "sweep", str(ROOT / "sweeps" / "demo.yaml"), "--storage", uri)
    assert outcome.status == "FAIL"
    assert outcome.detail.startswith(f"storage {uri}: the bucket 'no-such-bucket' does not exist")
    assert "Error" not in outcome.detail  # no exception class: `spanlift.errors.SettingsError:`
    line = one_line(swept)
    assert uri in line and "does not exist; create it first" in line, line


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """A port that takes connections and never answers (a firewall, a hung proxy)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


@pytest.mark.e2e
@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_a_storage_that_does_not_answer_is_one_line_within_the_timeout(
    tmp_path: Path, silent_endpoint: str, scheme: str
) -> None:
    """S3 at an endpoint that never answers; GCS at an emulator endpoint nothing listens on
    (without a network, gs:// is retried the same way): each client retries for minutes."""
    env = {"SPANLIFT_STORAGE_TIMEOUT": str(TIMEOUT_S)}
    if scheme == "s3":
        env |= s3_environment(silent_endpoint)
    else:
        env["CLOUD_STORAGE_EMULATOR_ENDPOINT"] = f"http://127.0.0.1:{free_port()}"
    uri = f"{scheme}://unreachable/p"
    demo = str(ROOT / "sweeps" / "demo.yaml")
    start = time.monotonic()
    result = spanlift(tmp_path, "sweep", demo, "--storage", uri, env=env, timeout=150)
    took = time.monotonic() - start
    line = one_line(result)
    assert uri in line and f"no answer within {TIMEOUT_S} s" in line, line
    assert "SPANLIFT_STORAGE_TIMEOUT" in line, line
    assert took < TIMEOUT_S + STARTUP_S, took
    assert not (tmp_path / "mlflow.db").exists()  # refused before anything is written
