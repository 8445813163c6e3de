"""Which skips fail in CI: those that hide an install step (`missing_packages.py`)."""

import pytest

from .missing_packages import skip_is_a_missing_package

KDIFFUSION = "k-diffusion is not installed"
PDFLATEX = "pdflatex not installed (Debian: apt-get install texlive-latex-recommended)"


@pytest.mark.parametrize("reason", [KDIFFUSION, PDFLATEX])
def test_a_skip_for_a_missing_package_fails_in_ci(reason: str) -> None:
    assert skip_is_a_missing_package(reason, {"CI": "true"})


@pytest.mark.parametrize("ci", ["", "false", "0"])
def test_outside_ci_a_missing_package_only_skips(ci: str) -> None:
    assert not skip_is_a_missing_package(KDIFFUSION, {"CI": ci})


def test_a_skip_for_another_reason_is_a_skip_in_ci() -> None:
    assert not skip_is_a_missing_package("this machine has a GPU", {"CI": "true"})
