"""The backbone registry: name → class. Adding a backbone is one file in this package with one
`register` line; the registration names the class (`name`)."""

from spanlift.registry import ClassRegistry

BACKBONES: ClassRegistry = ClassRegistry("backbone")
