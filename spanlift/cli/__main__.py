"""`python -m spanlift.cli …`, the same as `spanlift …`."""

from spanlift.cli import run

run()
