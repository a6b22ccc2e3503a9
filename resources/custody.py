"""The catalog and the lake, configured from the environment when the run starts."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import PrivateAttr

from governance.config import Settings, home_of, posix_path
from governance.lake import open_lake
from governance.zones import Lake

if TYPE_CHECKING:
    from governance.access.directory import Directory
    from governance.access.policy import Policy
    from governance.catalog import Catalog
    from governance.lineage.openlineage import Emitter
    from governance.lineage.versioned import ColumnOptions
    from governance.maintenance import LedgerRetention

OPENLINEAGE_API_KEY = "CUSTODY_OPENLINEAGE_API_KEY"


class CustodyResource(dg.ConfigurableResource):
    """Custody's catalog, lake, directory, OpenLineage transport, column lineage switch (on or off)
    and spec approval (on or off); unset fields fall back to the CUSTODY_* environment."""

    home: str | None = None
    lake_root: str | None = None
    catalog_url: str | None = None
    openlineage: str | None = None
    column_lineage: str | None = None
    directory: str | None = None
    specs_approval: str | None = None

    _catalog: Any = PrivateAttr(default=None)
    _lake: Any = PrivateAttr(default=None)

    def settings(self) -> Settings:
        settings = Settings.under(Path(self.home)) if self.home else Settings.from_env()
        if self.lake_root:
            settings = replace(settings, lake=posix_path(self.lake_root, "lake_root"))
        if self.catalog_url:
            settings = replace(settings, catalog_url=self.catalog_url)
        if self.openlineage:
            settings = replace(settings, openlineage=self.openlineage)
        if self.column_lineage:
            settings = replace(settings, column_lineage=self.column_lineage)
        if self.directory:
            settings = replace(settings, directory=self.directory, explicit=settings.explicit | {"directory"})
        if self.specs_approval:
            settings = replace(
                settings, specs_approval=self.specs_approval, explicit=settings.explicit | {"specs_approval"}
            )
        return settings

    def column_options(self) -> ColumnOptions | None:
        """How column lineage is extracted; None when `column_lineage` is off."""
        from governance.lineage.versioned import ColumnOptions

        settings = self.settings()
        return ColumnOptions.from_settings(settings.column_lineage, settings.column_lineage_cap)

    def policy(self) -> Policy:
        """Who may do what: the directory, the admin group and the assurance rules pinned in the catalog."""
        from governance.access.settings import open_policy

        return open_policy(self.catalog, self.settings(), os.environ, _directory)

    def events(self) -> Emitter:
        """The OpenLineage emitter; an HTTP transport's API key is read from the environment only."""
        settings = self.settings()
        return _emitter(settings.openlineage, settings.home, os.environ.get(OPENLINEAGE_API_KEY))

    def ledger_retention(self) -> LedgerRetention:
        """How long ledger entries stay hot and how long segments are kept: CUSTODY_LEDGER_* settings."""
        from governance.maintenance import LedgerRetention

        return LedgerRetention.from_environ(os.environ)

    @property
    def catalog(self) -> Catalog:
        # Imported on first use: SQLModel's tables are not needed to load the code location.
        from governance.catalog import Catalog

        if self._catalog is None:
            self._catalog = Catalog.from_settings(self.settings(), os.environ)
        return self._catalog

    @property
    def lake(self) -> Lake:
        # Opened once: a lake in a bucket makes an S3 client and checks the bucket when opened.
        if self._lake is None:
            self._lake = open_lake(self.settings())
        return self._lake


@cache
def _emitter(setting: str, home: Path, api_key: str | None) -> Emitter:
    # Each run asks for its emitter again: the client and its transport are made once per setting.
    from governance.lineage.openlineage import Emitter, transport_config

    return Emitter(transport_config(setting, home, api_key))


def _directory(setting: str, environ: Mapping[str, str]) -> Directory:
    # What the directory is opened with: the LDAP settings, and the home that keeps a file directory.
    used = {name: value for name, value in environ.items() if name.startswith("CUSTODY_LDAP_")}
    used["CUSTODY_HOME"] = str(home_of(environ))
    return _shared_directory(setting, str(Path.cwd()), tuple(sorted(used.items())))


@cache
def _shared_directory(setting: str, cwd: str, used: tuple[tuple[str, str], ...]) -> Directory:
    # Kept across runs for as long as the settings stay the same: an LDAP directory with its
    # membership cache; a file directory, which reads its file again whenever it changes.
    from governance.access.directory import open_directory

    return open_directory(setting, dict(used))
