"""Where a sweep keeps its files: a folder, or a bucket that nodes share through its URI alone.

    storage: runs/sweeps                 a local folder, or a file system every node mounts (EFS)
    storage: s3://bucket/prefix          S3, or any S3 API (endpoint from $AWS_ENDPOINT_URL)
    storage: gs://bucket/prefix          Google Cloud Storage

Files are written and read through `pyarrow.fs`, the file-system layer Ray Tune and Train use for
their own state (`storage_filesystem`). With a bucket (`BucketStorage`), each node works in a
node-local mirror of the storage (`local`, the same path on every node) and exchanges whole files
through the bucket: a finished file is `publish`ed (a folder's `manifest.json` last, so a folder
with a manifest is complete), and a file a node lacks is `fetch`ed before it is read (into a
temporary name, then renamed). What the files carry (a teacher entry's SHA-256 in its manifest) is
verified after the fetch as for a local folder. With a folder (`FolderStorage`), the mirror is the
folder itself and both are no-ops.
"""

import hashlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol
from urllib.parse import urlparse

import pyarrow.fs as pafs

from spanlift.errors import SettingsError
from spanlift.files import atomic_write
from spanlift.platform.bucket_probe import bucket_filesystem, check_bucket

BUCKET_SCHEMES = ("s3", "gs", "gcs")
"""URI schemes of the buckets a sweep can be stored in (pyarrow's S3 and GCS file systems)."""
URI_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
MANIFEST = "manifest.json"
"""The file of a folder published last: its presence in the bucket means the folder is whole."""


def is_uri(storage: str) -> bool:
    return bool(URI_SCHEME.match(storage))


def check_storage(storage: str) -> str:
    """`storage` if it is a folder or a bucket URI the product can write (s3://, gs://); any other
    URI is refused rather than written as a local folder of that name."""
    match = URI_SCHEME.match(storage)
    if not match:
        return storage
    scheme = match.group(1).lower()
    if scheme not in BUCKET_SCHEMES:
        raise SettingsError(
            f"storage {storage!r}: {scheme}:// cannot be written; give a folder (local, or a "
            "file system mounted on every node), s3://bucket/prefix or gs://bucket/prefix"
        )
    if not urlparse(storage).netloc:
        raise SettingsError(f"storage {storage!r} names no bucket; give {scheme}://bucket/prefix")
    return storage


class Storage(Protocol):
    """Where a sweep keeps its files (module docstring): a `FolderStorage` or a `BucketStorage`."""

    uri: str
    """An absolute folder, or a bucket URI."""
    local: Path
    """Where this node reads and writes the files: the folder, or the bucket's local mirror."""
    remote: bool

    def child(self, name: str) -> "Storage":
        """`<storage>/<name>`."""

    def ray_storage(self, name: str = "") -> dict:
        """RunConfig arguments that keep Ray Tune or Train runs in this storage's `name`."""

    def publish(self, path: Path) -> None:
        """Make the finished file or folder at `path` (under `local`) the storage's."""

    def exists(self, path: Path) -> bool:
        """Whether the file at `path`, or the whole folder, is in the storage."""

    def fetch(self, path: Path) -> bool:
        """Make the file or folder at `path` present on this node; False when the storage has
        none either."""

    def refresh(self, path: Path) -> None:
        """Make this node's copy of the folder at `path` the storage's: state another process
        may have changed, such as Tune's."""

    def remove(self, path: Path) -> None:
        """Delete the folder at `path` from the storage (this node's copy is left alone)."""

    def discard(self, path: Path) -> None:
        """Delete the file at `path`, this node's copy and the storage's."""

    def fetch_stored(self, path: Path | str | None) -> None:
        """`fetch` a path of this storage that this node lacks; other paths are left alone."""

    def names(self, folder: Path) -> list[str]:
        """The names of what the storage's `folder` holds (empty when it has nothing)."""


@dataclass(frozen=True)
class FolderStorage:
    """A folder every process reads and writes in place: nothing to publish or fetch."""

    local: Path
    remote: ClassVar[bool] = False

    @property
    def uri(self) -> str:
        return str(self.local)

    def child(self, name: str) -> "FolderStorage":
        return FolderStorage(self.local / name)

    def ray_storage(self, name: str = "") -> dict:
        return {"storage_path": str(self.local / name)}

    def publish(self, path: Path) -> None:
        pass

    def exists(self, path: Path) -> bool:
        return Path(path).exists()

    def fetch(self, path: Path) -> bool:
        return Path(path).exists()

    def refresh(self, path: Path) -> None:
        pass

    def remove(self, path: Path) -> None:
        pass

    def discard(self, path: Path) -> None:
        Path(path).unlink(missing_ok=True)

    def fetch_stored(self, path: Path | str | None) -> None:
        pass

    def names(self, folder: Path) -> list[str]:
        return sorted(p.name for p in Path(folder).glob("*"))


@dataclass(frozen=True)
class BucketStorage:
    """A bucket, worked with in this node's mirror of it (module docstring)."""

    uri: str
    filesystem: pafs.FileSystem
    base: str
    """The location within `filesystem`: `bucket/prefix`."""
    local: Path
    remote: ClassVar[bool] = True

    def child(self, name: str) -> "BucketStorage":
        return BucketStorage(
            f"{self.uri.rstrip('/')}/{name}",
            self.filesystem,
            f"{self.base}/{name}",
            self.local / name,
        )

    def remote_path(self, path: Path) -> str:
        """Where the local `path` (under `local`) lives in the bucket."""
        return f"{self.base}/{Path(path).relative_to(self.local).as_posix()}"

    def ray_storage(self, name: str = "") -> dict:
        path = f"{self.base}/{name}" if name else self.base
        return {"storage_path": path, "storage_filesystem": self.filesystem}

    def publish(self, path: Path) -> None:
        """Upload the file, or the folder's files with its manifest last."""
        path = Path(path)
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in sorted(files, key=lambda p: p.name == MANIFEST):
            pafs.copy_files(
                str(file),
                self.remote_path(file),
                source_filesystem=pafs.LocalFileSystem(),
                destination_filesystem=self.filesystem,
            )

    def exists(self, path: Path) -> bool:
        """The file, or the folder's manifest, is in the bucket."""
        target = self.remote_path(path)
        info = self.filesystem.get_file_info([target, f"{target}/{MANIFEST}"])
        return info[0].type == pafs.FileType.File or info[1].type == pafs.FileType.File

    def fetch(self, path: Path) -> bool:
        """Download what this node lacks: a file under a temporary name, a folder into a
        temporary folder, each then renamed."""
        path = Path(path)
        if path.exists():
            return True
        target = self.remote_path(path)
        kind = self.filesystem.get_file_info(target).type
        if kind == pafs.FileType.File:
            with atomic_write(path) as partial:
                download(self.filesystem, target, partial)
            return True
        if not self.exists(path):
            return False
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
        try:
            download(self.filesystem, target, partial)
            try:
                os.replace(partial, path)
            except OSError:  # another process of this node fetched it first
                shutil.rmtree(partial)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        return True

    def refresh(self, path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)
        if self.names(path):
            Path(path).mkdir(parents=True)
            download(self.filesystem, self.remote_path(path), Path(path))

    def remove(self, path: Path) -> None:
        if self.names(path):
            self.filesystem.delete_dir(self.remote_path(path))

    def discard(self, path: Path) -> None:
        Path(path).unlink(missing_ok=True)
        target = self.remote_path(path)
        if self.filesystem.get_file_info(target).type == pafs.FileType.File:
            self.filesystem.delete_file(target)

    def fetch_stored(self, path: Path | str | None) -> None:
        if path is None:
            return
        path = Path(path)
        if path.is_relative_to(self.local) and not self.fetch(path):
            raise FileNotFoundError(f"{self.remote_path(path)} is not in the storage {self.uri}")

    def names(self, folder: Path) -> list[str]:
        selector = pafs.FileSelector(self.remote_path(folder), allow_not_found=True)
        return sorted(info.base_name for info in self.filesystem.get_file_info(selector))


def download(filesystem: pafs.FileSystem, source: str, target: Path) -> None:
    """Copy the file or folder `source` of `filesystem` to the local `target`."""
    pafs.copy_files(
        source,
        str(target),
        source_filesystem=filesystem,
        destination_filesystem=pafs.LocalFileSystem(),
    )


def mirror_folder(uri: str) -> Path:
    """The node-local mirror of a bucket URI: the same path on every node, e.g.
    `/tmp/spanlift-storage/s3-bucket-prefix-1a2b3c4d`."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", uri.split("://", 1)[1]).strip("-")[:60]
    scheme = uri.split("://", 1)[0]
    tag = hashlib.sha256(uri.encode()).hexdigest()[:8]
    root = Path(os.environ.get("SPANLIFT_STORAGE_CACHE", Path(tempfile.gettempdir())))
    return root / "spanlift-storage" / f"{scheme}-{readable}-{tag}"


def open_storage(storage: str) -> Storage:
    """The storage at `storage` (a folder, or a bucket URI checked to exist and be writable
    within `$SPANLIFT_STORAGE_TIMEOUT`, `bucket_probe`); one clear SettingsError when it cannot
    be used."""
    check_storage(storage)
    if not is_uri(storage):
        return FolderStorage(Path(storage).expanduser().resolve())
    uri = storage.rstrip("/")
    check_bucket(uri)
    filesystem, base = bucket_filesystem(uri)
    return BucketStorage(uri, filesystem, base, mirror_folder(uri))
