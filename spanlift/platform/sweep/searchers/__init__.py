"""Searchers by name, as a sweep file's `search.algorithm` names them: one module each in this
package, found when it is imported, so adding one is adding its file (`base.py`: their shape)."""

import importlib
import pkgutil

from spanlift.platform.sweep.searchers.base import (
    SEARCHERS,
    OptionError,
    OptunaPlan,
    SearchAlgorithm,
    Space,
    default_search,
    stored_searcher,
)

for _found in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_found.name}")

__all__ = [
    "SEARCHERS",
    "OptionError",
    "OptunaPlan",
    "SearchAlgorithm",
    "Space",
    "default_search",
    "stored_searcher",
]
