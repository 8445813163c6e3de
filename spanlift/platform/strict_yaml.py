"""YAML as spanlift reads its files: `yaml.safe_load`, except that a mapping naming one key twice
is refused. YAML keeps the last of two equal keys, so a sweep file whose `fit:` is written twice
would otherwise run with one of them without a word."""

from typing import Any

import yaml


class DuplicateKeyError(ValueError):
    """`key 'fit' twice (lines 3 and 9)`."""


class StrictLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that raises `DuplicateKeyError` for a key written twice in a mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = lines.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: SafeLoader refuses it itself
                continue
            if first != key_node.start_mark.line + 1:
                raise DuplicateKeyError(
                    f"key {key!r} twice (lines {first} and {key_node.start_mark.line + 1})"
                )
        return super().construct_mapping(node, deep=deep)


def strict_load(text: str) -> Any:
    """The YAML document in `text`, as `yaml.safe_load` reads it; `DuplicateKeyError` for a key
    written twice in one mapping."""
    return yaml.load(text, Loader=StrictLoader)
