"""In CI a test may not be skipped because a package is missing: `make` installs every Python
extra the tests use and `.ci/run` the system packages (pdflatex, PostgreSQL), so such a skip
means an install step is missing, and it fails the test instead of hiding it."""

import os

MISSING = "not installed"
"""The words every skip for a missing package says (k-diffusion, image-reward, pdflatex,
PostgreSQL, psycopg)."""


def skip_is_a_missing_package(reason: str, environ: dict[str, str] | None = None) -> bool:
    """Whether a skip with `reason` hides a missing install step: in CI (`CI` set to a true value)
    a skip that says a package is not installed."""
    environ = os.environ if environ is None else environ
    in_ci = environ.get("CI", "").lower() in ("1", "true", "yes")
    return in_ci and MISSING in reason
