"""A throwaway PostgreSQL server: `initdb` in a new temporary folder, started by `pg_ctl` on a
free port of 127.0.0.1 (its Unix socket in the same folder), stopped and removed afterwards.

`initdb` and `postgres` refuse to run as root. As root the server runs as the `postgres` user
where one exists, else as `nobody`, through `runuser`; as anyone else it runs as that user. The
folder is made in the system's temporary folder (world-traversable, unlike pytest's own) and
handed to that user. Authentication is `trust` for local connections: the server listens on
127.0.0.1 only and lives as long as the tests that use it.

`unavailable()` says why no server can be started here (no PostgreSQL binaries, no psycopg, root
without an unprivileged user or runuser); tests skip with that reason.
"""

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

USER = "spanlift"
"""The server's superuser, the user of every URI below."""
FAST = ("-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
"""Settings for a server whose data may be lost: tests need no durability."""


def binaries() -> Path | None:
    """The folder holding initdb and pg_ctl: on PATH, else Debian's newest /usr/lib/postgresql."""
    found = shutil.which("initdb"), shutil.which("pg_ctl")
    if all(found):
        return Path(found[0]).parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: p.parts)
    return versions[-1].parent if versions else None


def server_user() -> str | None:
    """Who runs the server: this user, or as root `postgres` or `nobody` (None: neither)."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    return None


def unavailable() -> str | None:
    """Why no PostgreSQL server can be started here, or None."""
    if binaries() is None:
        return "PostgreSQL's initdb and pg_ctl are not installed (apt install postgresql)"
    if server_user() is None:
        return "running as root with no postgres or nobody user to run PostgreSQL as"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser to start PostgreSQL as another user"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'spanlift[cluster]')"
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class PostgresServer:
    folder: Path
    port: int

    def uri(self, database: str, driver: str = "psycopg") -> str:
        """The MLflow store URI of `database` on this server."""
        return f"postgresql+{driver}://{USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A new, empty database; its URI."""
        import psycopg

        address = f"host=127.0.0.1 port={self.port} user={USER} dbname=postgres"
        with psycopg.connect(address, autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.uri(name)


def as_server_user(command: list[str], user: str) -> list[str]:
    """`command` run as `user`: through runuser when this process is root and `user` is not."""
    if os.geteuid() == 0 and user != "root":
        return ["runuser", "-u", user, "--", *command]
    return command


@contextlib.contextmanager
def postgres_server(durable: bool = False) -> Iterator[PostgresServer]:
    """A PostgreSQL server for the block's duration; `durable`: PostgreSQL's default settings
    (fsync on), else FAST."""
    bin_folder, user = binaries(), server_user()
    assert bin_folder is not None and user is not None, unavailable()
    folder = Path(tempfile.mkdtemp(prefix="spanlift-postgres-"))
    shutil.chown(folder, user)
    data, port = folder / "data", free_port()

    def run(program: str, *args: str) -> None:
        command = as_server_user([str(bin_folder / program), *args], user)
        subprocess.run(command, check=True, capture_output=True, text=True, cwd=folder)

    settings = ["-p", str(port), "-k", str(folder), "-c", "listen_addresses=127.0.0.1"]
    settings += [] if durable else list(FAST)
    try:
        run("initdb", "-D", str(data), "-U", USER, "--auth=trust", "-E", "UTF8", "--no-sync")
        log = str(folder / "log")
        run("pg_ctl", "-D", str(data), "-o", " ".join(settings), "-l", log, "-w", "start")
        try:
            yield PostgresServer(folder, port)
        finally:
            run("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
