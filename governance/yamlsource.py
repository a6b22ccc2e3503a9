"""YAML loading that keeps line numbers and refuses duplicate keys, for messages that point at a line.

Two things valid YAML allows are refused before a document is composed. Aliases (`*name`): the
composed document keeps one node for every use of an anchor, but the data expands each use, and
seven nested levels of nine make 4.8 million strings. Nesting deeper than MAX_DEPTH: composing
and building recurse once per level, and deep enough nesting crashes the process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from governance.errors import UnsafeYaml, error_summary

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
STR_TAG = "tag:yaml.org,2002:str"
SCALAR_TAGS = {f"tag:yaml.org,2002:{name}" for name in ("null", "bool", "int", "float", "timestamp")}
MAX_DEPTH = 100
ALIASES = "YAML aliases (*name) are not accepted: write the value out"
TOO_DEEP = f"YAML nested more than {MAX_DEPTH} levels deep"


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


def read_capped(path: Path, cap: int) -> tuple[bytes, int]:
    """The bytes of `path` and its size; of a file larger than `cap` (the size says so), no more
    than cap + 1 bytes are read. A device such as /dev/zero reports no size: what was read counts."""
    with path.open("rb") as handle:
        head = handle.read(cap + 1)
        return head, max(os.fstat(handle.fileno()).st_size, len(head))


def yaml_problem(err: yaml.YAMLError) -> str:
    """A YAML error on one line, with its line number: PyYAML's own message spans several."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or error_summary(err)
    return f"line {mark.line + 1}: {problem}" if mark else problem


def safe_load(text: str) -> Any:
    """`yaml.safe_load`, refusing aliases and deep nesting (UnsafeYaml)."""
    _refuse_unsafe(text)
    return yaml.load(text, Loader=Loader)


def load_located(text: str) -> LocatedYaml:
    """Parse one YAML document; raises yaml.YAMLError with a position on syntax errors, and
    UnsafeYaml at the first alias or past MAX_DEPTH."""
    _refuse_unsafe(text)
    loader = Loader(text)
    try:
        node = loader.get_single_node()
        located = LocatedYaml(data=None)
        if node is not None:
            located.data = _build(loader, node, "", located)
        return located
    finally:
        loader.dispose()


def _refuse_unsafe(text: str) -> None:
    """Raise UnsafeYaml at the first alias or collection past MAX_DEPTH, from the parser's events,
    which nest nothing. Every alias starts with `*`: text without one that cannot nest past
    MAX_DEPTH (most specs) is not parsed twice."""
    if "*" not in text and _depth_bound(text) <= MAX_DEPTH:
        return
    depth = 0
    try:
        for event in yaml.parse(text, Loader=Loader):
            if isinstance(event, yaml.AliasEvent):
                raise UnsafeYaml(_line(event), ALIASES)
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise UnsafeYaml(_line(event), TOO_DEEP)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.MarkedYAMLError as err:
        # libyaml 0.2.5 (PyYAML 6.0.4's C loader) stops deep flow nesting in its scanner, which
        # reads ahead of the events: the same refusal, whichever layer makes it.
        if "nesting depth" not in str(err.problem) or err.problem_mark is None:
            raise
        raise UnsafeYaml(err.problem_mark.line + 1, TOO_DEEP) from err


def _line(event: yaml.Event) -> int:
    # The parser marks every event it makes; only events built by hand have none.
    assert event.start_mark is not None
    return event.start_mark.line + 1


def _depth_bound(text: str) -> int:
    """How deep `text` can nest at most. A flow collection opens with `[` or `{`, and each counts
    (a running depth could be fooled by brackets in quoted strings). A block collection nests in
    the one before it by more indentation, or on the same line after a `-`, `?` or `:`."""
    block = max(
        (len(line) - len(line.lstrip(" ")) + sum(map(line.count, "-?:")) for line in text.splitlines()), default=0
    )
    return text.count("[") + text.count("{") + block


def _build(loader: Any, node: yaml.Node, path: str, out: LocatedYaml) -> Any:
    out.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = (
                _scalar(loader, key_node)
                if isinstance(key_node, yaml.ScalarNode)
                else loader.construct_object(key_node, deep=True)
            )
            child = f"{path}.{key}" if path else str(key)
            if key in result:
                out.duplicates.append((child, key_node.start_mark.line + 1))
                continue
            out.lines[child] = key_node.start_mark.line + 1
            result[key] = _build(loader, value_node, child, out)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_build(loader, item, f"{path}.{i}" if path else str(i), out) for i, item in enumerate(node.value)]
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
