"""How flowctl reads the YAML files a user writes (scenarios, the pipeline conf, the policy):
a loader that refuses a key given twice in one mapping, and the one-line reason a file is not
UTF-8 text. PyYAML keeps the last of two equal keys without a word, which loses a setting as
silently as an unknown key would (those are refused too)."""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError

_MERGE_TAG = "tag:yaml.org,2002:merge"


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that gives one key twice; ``<<`` merges still
    override, as YAML means them to."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            first_line: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    seen = first_line.get(key)
                except TypeError:  # an unhashable key: the constructor's own error follows
                    continue
                if seen is not None:
                    raise ConstructorError(
                        None,
                        None,
                        f"key {key!r} given twice (first at line {seen}): which one is meant?",
                        key_node.start_mark,
                    )
                first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def utf8_problem(error: UnicodeDecodeError) -> str:
    """One line for a file that is not UTF-8 text: which byte, where."""
    byte = error.object[error.start : error.start + 1].hex()
    return f"not UTF-8 text (byte 0x{byte} at offset {error.start}): save it as UTF-8"
