"""Whether a bucket can be used, answered within a time limit: it exists, and a probe object can
be written and removed under the storage's prefix.

The probe runs in a child process (`python -m spanlift.platform.bucket_probe URI`) that is killed
at the limit, `$SPANLIFT_STORAGE_TIMEOUT` seconds (default `DEFAULT_TIMEOUT_S`): the S3 and GCS
clients retry a service that does not answer for minutes, a pyarrow call cannot be interrupted,
and an S3 request left running in this process would also hold up its exit. Whatever stops the
probe (a missing bucket, refused credentials, no network, a file system this pyarrow was built
without, no answer in time) is one `SettingsError` naming the URI and what to check.
"""

import math
import os
import socket
import subprocess
import sys
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.fs as pafs

from spanlift.errors import SettingsError

TIMEOUT_VARIABLE = "SPANLIFT_STORAGE_TIMEOUT"
DEFAULT_TIMEOUT_S = 5.0
"""Seconds a bucket has to answer the probe: a few round trips to the service."""
STORAGE_ERRORS = (OSError, ValueError, pa.ArrowException)
"""What pyarrow raises for a storage it cannot use: OSError (its ArrowIOError, every failed S3 or
GCS request), ValueError (ArrowInvalid: a URI it cannot parse) and ArrowException
(ArrowNotImplementedError: a file system this pyarrow was built without)."""
REFUSED = 2
"""The probe's exit status when it refused the storage; its last line of stderr says why."""


def storage_timeout() -> float:
    """`$SPANLIFT_STORAGE_TIMEOUT` in seconds, else the default."""
    text = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise SettingsError(f"${TIMEOUT_VARIABLE}={text!r}: expected a number of seconds > 0")
    return seconds


def check_bucket(uri: str) -> None:
    """The bucket at `uri` exists and takes a probe object (module docstring), within the time
    limit; SettingsError otherwise."""
    seconds = storage_timeout()
    check_endpoint(uri, seconds)
    paths = os.pathsep.join(path for path in sys.path if path)  # this process's spanlift
    try:
        probe = subprocess.run(
            [sys.executable, "-m", __name__, uri],
            env={**os.environ, "PYTHONPATH": paths},
            capture_output=True,
            text=True,
            timeout=seconds,
        )
    except subprocess.TimeoutExpired:
        raise SettingsError(
            f"storage {uri}: no answer within {seconds:g} s; check the network (a proxy, a "
            f"firewall), the bucket's endpoint and the credentials' source, or allow longer "
            f"with ${TIMEOUT_VARIABLE}"
        ) from None
    if probe.returncode == REFUSED:
        raise SettingsError(probe.stderr.strip().splitlines()[-1])
    if probe.returncode != 0:
        raise RuntimeError(f"the storage probe of {uri} failed:\n{probe.stderr}")


def check_endpoint(uri: str, seconds: float) -> None:
    """A custom S3 endpoint ($AWS_ENDPOINT_URL, e.g. MinIO) that nothing answers is refused at
    once instead of after the S3 client's retries."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if not endpoint or not uri.startswith("s3://"):
        return
    parsed = urlparse(endpoint if "://" in endpoint else f"http://{endpoint}")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname, port), timeout=seconds).close()
    except OSError as exc:
        raise SettingsError(
            f"storage {uri}: the S3 endpoint {endpoint} ($AWS_ENDPOINT_URL) cannot be reached "
            f"({exc.strerror or exc})"
        ) from None


def bucket_filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """pyarrow's file system of the bucket URI and the location in it (`bucket/prefix`)."""
    try:
        filesystem, base = pafs.FileSystem.from_uri(uri)
    except STORAGE_ERRORS as exc:
        raise SettingsError(f"storage {uri}: {explain(exc)}") from None
    return filesystem, base.rstrip("/")


def check_writable(uri: str, filesystem: pafs.FileSystem, base: str) -> None:
    """The bucket exists and a probe object can be written and removed under `base`."""
    bucket = base.split("/", 1)[0]
    probe = f"{base}/.spanlift-probe-{socket.gethostname()}-{os.getpid()}"
    try:
        if filesystem.get_file_info(bucket).type == pafs.FileType.NotFound:
            raise SettingsError(
                f"storage {uri}: the bucket {bucket!r} does not exist; create it first"
            )
        with filesystem.open_output_stream(probe) as handle:
            handle.write(b"probe")
        filesystem.delete_file(probe)
    except STORAGE_ERRORS as exc:
        raise SettingsError(f"storage {uri}: {explain(exc)}") from None


CREDENTIALS = (
    "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile or the node's role; "
    "GOOGLE_APPLICATION_CREDENTIALS for gs://"
)
PROBLEMS = (
    ("NO_SUCH_BUCKET", "the bucket does not exist; create it first"),
    ("HTTP status 404", "the bucket does not exist; create it first"),
    ("ACCESS_DENIED", f"access denied: check the credentials ({CREDENTIALS})"),
    ("HTTP status 403", f"access denied: check the credentials ({CREDENTIALS})"),
    ("NETWORK_CONNECTION", "the storage service cannot be reached: check the network"),
    ("credentials", f"no usable credentials: set {CREDENTIALS}"),
    ("compiled without", "this pyarrow was built without its file system: install pyarrow's wheel"),
)
"""Substrings of the S3/GCS clients' and pyarrow's errors, and what they mean to a user."""


def explain(exc: BaseException) -> str:
    """What `exc` means to a user, then its first line; what to check where nothing matches."""
    text = str(exc)
    for marker, meaning in PROBLEMS:
        if marker.lower() in text.lower():
            return f"{meaning} ({first_line(exc)})"
    return f"{first_line(exc)}; check the URI, the credentials and the network"


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def probe(uri: str) -> int:
    """The child process's work: 0 when the bucket takes the probe, else `REFUSED` with the
    reason as the last line of stderr."""
    try:
        check_writable(uri, *bucket_filesystem(uri))
    except SettingsError as refused:
        print(refused, file=sys.stderr)
        return REFUSED
    return 0


if __name__ == "__main__":
    sys.exit(probe(sys.argv[1]))
