"""A run store in a PostgreSQL server: its driver, whether it answers, and the lock under which
MLflow first creates its tables there.

MLflow takes a SQLAlchemy URL as its store, `postgresql+psycopg://USER@HOST:PORT/DATABASE` (the
`cluster` extra installs psycopg; a password is best kept out of the URI, in `~/.pgpass` or
`$PGPASSWORD`, which the driver reads). Three things differ from a SQLite file:

- the driver is an optional package: without it SQLAlchemy fails deep inside MLflow, so it is
  imported first (`check_driver`) and its absence is one line naming the extra;
- a server that does not answer makes MLflow retry its engine for about 100 s
  (0.1 s × (2^k − 1) for k = 1…9) before a traceback, so one connection with a 5 s timeout is
  tried first and its failure is one line with the host and port (`schema_lock`);
- MLflow creates and migrates the tables of an empty database on first contact without a lock
  that reaches across machines (a file lock in the local temporary folder guards only some of its
  stores): processes that open a new database at once each run `CREATE TABLE`, and all but one
  fail. `schema_lock` holds a PostgreSQL advisory lock, which every client of the database
  shares wherever it runs, while MLflow first opens the store.
"""

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from spanlift.errors import SettingsError

EXTRA = "pip install 'spanlift[cluster]'"
DRIVER = "postgresql+psycopg"
"""The scheme the `cluster` extra's driver (psycopg 3) answers to."""
LIBPQ_DRIVERS = ("psycopg", "psycopg2", "psycopg2cffi")
"""Drivers built on libpq, which take `connect_timeout`."""
CONNECT_SECONDS = 5
SCHEMA_LOCK = 0x5350414E4C494654
"""The advisory lock's key: the bytes of "SPANLIFT" as one 64-bit integer."""


def is_postgres(uri: str) -> bool:
    """`uri` is a SQLAlchemy URL of PostgreSQL (`postgresql://`, `postgresql+driver://`)."""
    return uri.split("://", 1)[0].split("+", 1)[0] == "postgresql"


def shown(uri: str) -> str:
    """`uri` with the password of its `user:password@` part, if any, replaced by ***."""
    return re.sub(r"(://[^:/@?#]*:)[^@/?#]*@", r"\1***@", uri, count=1)


def check_driver(uri: str) -> None:
    """The driver a PostgreSQL URI names can be imported; a one-line SettingsError naming the
    extra to install where it cannot. Other URIs are left to MLflow."""
    if not is_postgres(uri):
        return
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        dialect = make_url(uri).get_dialect()
    except NoSuchModuleError:  # an ArgumentError too: caught first
        scheme = uri.split("://", 1)[0]
        raise SettingsError(
            f"tracking URI {shown(uri)}: SQLAlchemy knows no PostgreSQL driver {scheme!r}; use "
            f"{DRIVER}://USER@HOST:PORT/DATABASE ({EXTRA})"
        ) from None
    except ArgumentError as exc:
        raise SettingsError(f"tracking URI {shown(uri)} is not a database URL ({exc})") from None
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        raise SettingsError(missing_driver(uri, dialect.driver, exc.name)) from None


def missing_driver(uri: str, driver: str, module: str | None) -> str:
    """The line for a PostgreSQL URI whose driver (`driver`, SQLAlchemy's name; `module`, what
    failed to import) is not installed. SQLAlchemy 2.1 reads `postgresql://` as psycopg's."""
    if driver == "psycopg":
        return f"tracking URI {shown(uri)} needs the PostgreSQL driver psycopg: {EXTRA}"
    return (
        f"tracking URI {shown(uri)} needs the PostgreSQL driver {module or driver}, which is not "
        f"installed: {EXTRA} and write the URI as {DRIVER}://…"
    )


def server_address(url: Any) -> str:
    """HOST:PORT of a SQLAlchemy URL, or the folder of its Unix socket (`?host=/run/…`)."""
    host = url.query.get("host") or url.host or "localhost"
    port = url.query.get("port") or url.port or 5432
    return host if str(host).startswith("/") else f"{host}:{port}"


def unreachable(uri: str, error: Exception) -> str:
    """The line for a PostgreSQL server that refused or did not answer a connection."""
    from sqlalchemy.engine import make_url

    url = make_url(uri)
    cause = getattr(error, "orig", None) or error
    reason = next((line.strip() for line in str(cause).splitlines() if line.strip()), "")
    where = server_address(url)
    host, _, port = where.rpartition(":") if ":" in where else (where, "", "5432")
    return (
        f"PostgreSQL at {where} (database {url.database!r}, user {url.username!r}) cannot be "
        f"reached: {reason[:200] or type(cause).__name__}; check that the server runs and listens "
        f"there (pg_isready -h {host} -p {port}), that a firewall or security group lets the port "
        f"through, and that the user may log in to an existing database (createdb -h {host} "
        f"-p {port} {url.database or 'DATABASE'})"
    )


@contextmanager
def schema_lock(uri: str) -> Iterator[None]:
    """Connect to the PostgreSQL server of `uri` (at most CONNECT_SECONDS), failing with one line
    where it cannot, and hold the database's advisory lock SCHEMA_LOCK until the block ends: one
    process at a time makes MLflow's first contact, so only the first creates the tables and the
    others find them complete."""
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    check_driver(uri)
    url = sqlalchemy.engine.make_url(uri)
    timeout = (
        {"connect_timeout": CONNECT_SECONDS} if url.get_dialect().driver in LIBPQ_DRIVERS else {}
    )
    engine = sqlalchemy.create_engine(url, poolclass=NullPool, connect_args=timeout)
    try:
        try:
            connection = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        except sqlalchemy.exc.DBAPIError as exc:
            raise SettingsError(unreachable(uri, exc)) from None
        with connection:
            connection.execute(
                sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": SCHEMA_LOCK}
            )
            yield  # closing the connection ends its session, which releases the lock
    finally:
        engine.dispose()
