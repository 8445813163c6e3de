"""Backbones loaded once per process.

Tune reuses a sweep's trial processes and its evaluator actors live for the whole sweep, so a
backbone loaded for one trial is there for the next: `loaded_backbone` returns the process's copy,
and `backbone_loads` counts the loads this process really did (a sweep reports their sum as its
model loads). The copy is shared: callers may move it to their device but never change it.
"""

import json
from collections import OrderedDict

from spanlift.backbones import Backbone, load_backbone

KEPT = 2
"""Backbones kept per process (a sweep uses one; the least recently used goes beyond this)."""

_LOADED: OrderedDict[str, Backbone] = OrderedDict()
_LOADS = 0


def loaded_key(name: str, options: dict[str, object] | None) -> str:
    return json.dumps([name, options or {}], sort_keys=True, default=str)


def loaded_backbone(name: str, options: dict[str, object] | None = None) -> Backbone:
    """This process's `load_backbone(name, **options)`, loaded on first use."""
    global _LOADS
    options = options or {}
    key = loaded_key(name, options)
    if key not in _LOADED:
        _LOADED[key] = load_backbone(name, **options)
        _LOADS += 1
        while len(_LOADED) > KEPT:
            _LOADED.popitem(last=False)
    _LOADED.move_to_end(key)
    return _LOADED[key]


def keep_loaded(name: str, options: dict[str, object] | None, backbone: Backbone) -> None:
    """`backbone` as this process's copy of `name` with `options`, instead of loading it: a
    stand-in built elsewhere (a random-weight network of the real size, to plan memory where
    the real weights cannot be read)."""
    _LOADED[loaded_key(name, options)] = backbone
    _LOADED.move_to_end(loaded_key(name, options))


def backbone_loads() -> int:
    """Backbone loads this process did so far."""
    return _LOADS
