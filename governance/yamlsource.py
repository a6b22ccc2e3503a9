"""YAML loading that keeps line numbers and refuses duplicate keys, for messages that point at a line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
STR_TAG = "tag:yaml.org,2002:str"
SCALAR_TAGS = {f"tag:yaml.org,2002:{name}" for name in ("null", "bool", "int", "float", "timestamp")}


@dataclass
class LocatedYaml:
    """A parsed document with the line of each field path (`roles.owner`, `columns.2.type`)."""

    data: Any
    lines: dict[str, int] = field(default_factory=dict)
    duplicates: list[tuple[str, int]] = field(default_factory=list)

    def line_of(self, path: str) -> int | None:
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path.rpartition(".")[0]
        return self.lines.get("")


def load_located(text: str) -> LocatedYaml:
    """Parse one YAML document; raises yaml.YAMLError with a position on syntax errors."""
    loader = Loader(text)
    try:
        node = loader.get_single_node()
        located = LocatedYaml(data=None)
        if node is not None:
            located.data = _build(loader, node, "", located)
        return located
    finally:
        loader.dispose()


def _build(loader: Any, node: yaml.Node, path: str, out: LocatedYaml) -> Any:
    out.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _scalar(loader, key_node) if isinstance(key_node, yaml.ScalarNode) else loader.construct_object(key_node, deep=True)
            child = f"{path}.{key}" if path else str(key)
            if key in result:
                out.duplicates.append((child, key_node.start_mark.line + 1))
                continue
            out.lines[child] = key_node.start_mark.line + 1
            result[key] = _build(loader, value_node, child, out)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [
            _build(loader, item, f"{path}.{i}" if path else str(i), out)
            for i, item in enumerate(node.value)
        ]
    return _scalar(loader, node) if isinstance(node, yaml.ScalarNode) else loader.construct_object(node, deep=True)


def _scalar(loader: Any, node: yaml.ScalarNode) -> Any:
    """A plain scalar through its tag's constructor, without the bookkeeping `construct_object`
    keeps for aliases and recursive structures, which a scalar never needs: most of the load time
    of a spec. Other tags (`!!map` on a scalar, say) take the general path and its errors."""
    if node.tag == STR_TAG:
        return node.value
    if node.tag in SCALAR_TAGS:
        return loader.yaml_constructors[node.tag](loader, node)
    return loader.construct_object(node, deep=True)
