"""The backbone registry: name → class. Adding a backbone is one file and one `register` line."""

from spanlift.registry import Registry

BACKBONES: Registry = Registry("backbone")
