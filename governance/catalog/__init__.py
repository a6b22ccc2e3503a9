"""The catalog: SQLModel tables and the Catalog API."""

from governance.catalog.api import Catalog, utcnow
from governance.catalog.engine import make_engine

__all__ = ["Catalog", "make_engine", "utcnow"]
