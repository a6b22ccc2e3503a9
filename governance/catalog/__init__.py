"""The catalog: SQLModel tables and the Catalog API, and the plain values read from it (`entries`,
`ledgerfilter`). Its names load on first use (`from governance.catalog import Catalog`): a command
that needs no database loads none of its libraries."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from governance.catalog.owed import closing_checkpoint

if TYPE_CHECKING:
    from governance.catalog.api import Catalog, utc_from, utcnow
    from governance.catalog.engine import make_engine

WHERE = {
    "Catalog": "governance.catalog.api",
    "utc_from": "governance.catalog.api",
    "utcnow": "governance.catalog.api",
    "make_engine": "governance.catalog.engine",
}
__all__ = ["Catalog", "closing_checkpoint", "make_engine", "utc_from", "utcnow"]

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name not in WHERE:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(WHERE[name]), name)
        globals()[name] = value
        return value
