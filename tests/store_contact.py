"""One process's first contact with a run store, for tests that start several at once: a module
of its own so that a child process imports only the store code, not a test module."""

from spanlift.platform.tracking.runs import connect


def open_store_at(uri: str, start) -> str:
    """`connect(uri)` once every process is ready (`start`, a barrier); "ok" or the first line of
    what it raised."""
    start.wait()  # every process reaches connect() at the same moment
    try:
        connect(uri)
        return "ok"
    except Exception as exc:  # the test reports what each process saw
        return str(exc).splitlines()[0]
