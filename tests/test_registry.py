"""Plug-ins declare themselves once: a registration names its class, and a file dropped into the
solvers' or the backbones' package is registered without any other file naming it."""

from pathlib import Path

import pytest

from spanlift import registry
from spanlift.backbones import BACKBONES
from spanlift.solvers import SOLVERS
from tests.package_copy import read_back

DROPPED_SOLVER = '''
from spanlift.solvers.base import Solver
from spanlift.solvers.registry import SOLVERS


@SOLVERS.register("dropped_in")
class DroppedIn(Solver):
    """Euler under a name that no other file mentions."""

    def direction(self, i, x, history, denoiser):
        return history[0].derivative
'''

DROPPED_BACKBONE = '''
from spanlift.backbones.gmm import GaussianMixture
from spanlift.backbones.registry import BACKBONES


@BACKBONES.register("dropped_in")
class DroppedIn(GaussianMixture):
    """The Gaussian mixture under a name that no other file mentions."""
'''

READ_BACK = """
import json
import spanlift
from spanlift.backbones import BACKBONES
from spanlift.solvers import SOLVERS
found = {"solver": "dropped_in" in SOLVERS, "backbone": "dropped_in" in BACKBONES}
names = {"solver": getattr(SOLVERS.get("dropped_in"), "name", None) if found["solver"] else None}
print(json.dumps({"package": spanlift.__file__, "found": found, **names}))
"""


@pytest.mark.parametrize("plugins", [SOLVERS, BACKBONES], ids=["solvers", "backbones"])
def test_every_registered_class_is_named_by_its_registration(plugins):
    assert [(key, cls.name) for key, cls in plugins] == [(key, key) for key in plugins.names()]


def test_a_class_that_names_itself_is_refused():
    things = registry.ClassRegistry("thing")

    class Named:
        name = "other"

    with pytest.raises(ValueError, match="Named already has the name 'other'"):
        things.register("named")(Named)
    assert "named" not in things


def test_a_file_dropped_into_the_package_is_registered(tmp_path: Path):
    """A copy of the package with one new solver file and one new backbone file, imported in a
    fresh process: both are registered, and the solver is named by its registration."""
    copy = tmp_path / "spanlift"
    seen = read_back(
        tmp_path,
        {"solvers/dropped_in.py": DROPPED_SOLVER, "backbones/dropped_in.py": DROPPED_BACKBONE},
        READ_BACK,
    )
    assert seen["package"] == str(copy / "__init__.py")
    assert seen["found"] == {"solver": True, "backbone": True}
    assert seen["solver"] == "dropped_in"
