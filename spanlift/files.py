"""Files: content hashes (cache keys, weights identities, verification), atomic writes, and
whether a path can be written before anything is."""

import errno
import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextmanager
def atomic_write(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` to write to; renamed to `path` when the block ends.

        with atomic_write(target) as partial:
            torch.save(obj, partial)

    Readers never see a half-written file, and a failed write leaves nothing behind. The
    temporary name keeps the suffix, so writers that add one (numpy) write where they are told.
    The file gets the mode any file the user writes gets (0666 less the umask), not the
    temporary file's private 0600.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=path.suffix)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, default_file_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def default_file_mode() -> int:
    """0666 less the process's umask: the mode `open(path, "w")` gives a new file. The umask is
    read by setting it and setting it back (the one way POSIX offers)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def check_writable(path: Path) -> None:
    """Raise OSError (its `filename` the folder) unless a file could be created at `path`, or
    inside it when it is an existing folder: the nearest folder that exists must take a new file.
    Nothing is left behind (the probe file is unnamed, or removed as it closes)."""
    path = Path(path)
    folder = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    if folder == path and not folder.is_dir():
        folder = folder.parent
    if not folder.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(folder))
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise type(exc)(exc.errno, exc.strerror, str(folder)) from None
