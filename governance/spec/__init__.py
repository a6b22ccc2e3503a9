"""Asset specs: the YAML an owner edits, its model and checks (`model`), the cache of parsed files
(`cache`), the messages owners read (`messages`) and what applying a spec changes (`diff`).

The model's names load on first use (`from governance.spec import Spec`): a command that reads no
spec (`custody --help`) loads neither pydantic nor YAML."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from governance.spec.classification import RANK, Classification

if TYPE_CHECKING:
    from governance.spec.model import (
        COLUMN_TYPE,
        AssetSpec,
        Column,
        Feed,
        JdbcSource,
        LoadedSpecs,
        Retention,
        Spec,
        SpecSet,
        StreamSource,
        check_specs,
        code_version,
        folder_stamp,
        lag,
        load_specs,
        load_upstream,
        load_valid_specs,
        resolve_transform,
        sensitive_inputs,
        spec_schema,
    )

__all__ = [
    "COLUMN_TYPE",
    "RANK",
    "AssetSpec",
    "Classification",
    "Column",
    "Feed",
    "JdbcSource",
    "LoadedSpecs",
    "Retention",
    "Spec",
    "SpecSet",
    "StreamSource",
    "check_specs",
    "code_version",
    "folder_stamp",
    "lag",
    "load_specs",
    "load_upstream",
    "load_valid_specs",
    "resolve_transform",
    "sensitive_inputs",
    "spec_schema",
]
# The model's names, imported when first asked for.
LAZY = frozenset(__all__) - {"RANK", "Classification"}

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name not in LAZY:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module("governance.spec.model"), name)
        globals()[name] = value
        return value
