"""The catalog: SQLModel tables and the Catalog API."""

from governance.catalog.api import Catalog, closing_checkpoint, utc_from, utcnow
from governance.catalog.engine import make_engine

__all__ = ["Catalog", "closing_checkpoint", "make_engine", "utc_from", "utcnow"]
