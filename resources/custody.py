"""The catalog and the lake, configured from the environment when the run starts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import PrivateAttr

from governance.config import Settings
from governance.zones import Lake

if TYPE_CHECKING:
    from governance.catalog import Catalog


class CustodyResource(dg.ConfigurableResource):
    """Custody's catalog and lake; unset fields fall back to the CUSTODY_* environment."""

    home: str | None = None
    lake_root: str | None = None
    catalog_url: str | None = None

    _catalog: Any = PrivateAttr(default=None)

    def settings(self) -> Settings:
        settings = Settings.under(Path(self.home)) if self.home else Settings.from_env()
        if self.lake_root:
            settings = replace(settings, lake=Path(self.lake_root))
        if self.catalog_url:
            settings = replace(settings, catalog_url=self.catalog_url)
        return settings

    @property
    def catalog(self) -> Catalog:
        # Imported on first use: SQLModel's tables are not needed to load the code location.
        from governance.catalog import Catalog

        if self._catalog is None:
            self._catalog = Catalog.from_url(self.settings().catalog_url)
        return self._catalog

    @property
    def lake(self) -> Lake:
        return Lake(self.settings().lake)
