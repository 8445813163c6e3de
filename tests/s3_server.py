"""A real S3 API on 127.0.0.1: moto's server, started and stopped by the test that needs it.

`s3_environment` is what a user sets to point spanlift (pyarrow, Ray) at a non-AWS S3 endpoint:
`AWS_ENDPOINT_URL` and credentials (moto accepts any; with `auth=True` it checks them).
"""

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow.fs as pafs


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def s3_environment(endpoint: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "spanlift-test",
        "AWS_SECRET_ACCESS_KEY": "spanlift-test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }


@contextmanager
def moto_server(auth: bool = False) -> Iterator[str]:
    """The endpoint URL of a fresh moto S3 server; `auth`: requests need valid IAM credentials."""
    port = free_port()
    env = {**os.environ, **({"INITIAL_NO_AUTH_ACTION_COUNT": "0"} if auth else {})}
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("moto's S3 server did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def make_bucket(endpoint: str, bucket: str) -> pafs.S3FileSystem:
    """Create `bucket` on the server; the file system to inspect it with."""
    env = s3_environment(endpoint)
    filesystem = pafs.S3FileSystem(
        endpoint_override=endpoint,
        access_key=env["AWS_ACCESS_KEY_ID"],
        secret_key=env["AWS_SECRET_ACCESS_KEY"],
        region=env["AWS_DEFAULT_REGION"],
        allow_bucket_creation=True,
    )
    filesystem.create_dir(bucket)
    return filesystem


def keys(filesystem: pafs.FileSystem, prefix: str) -> list[str]:
    """Every object under `prefix`, as paths relative to it."""
    found = filesystem.get_file_info(
        pafs.FileSelector(prefix, recursive=True, allow_not_found=True)
    )
    return sorted(i.path.removeprefix(prefix + "/") for i in found if i.type == pafs.FileType.File)
