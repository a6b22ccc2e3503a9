"""Custody's asset specs as a Dagster Component: the project's `defs/` folder declares it in a
`defs.yaml`, and `dg list defs`, `dg check defs`, `dg dev` and `dg launch` find the assets there."""

from __future__ import annotations

import os

import dagster as dg

from assets.definitions import load_definitions
from governance.config import Settings

# Set by `dg check defs` (and `dagster definitions validate`) while it loads the definitions.
VALIDATING = "DAGSTER_IS_DEFS_VALIDATION_CLI"


class CustodySpecs(dg.Component, dg.Resolvable, dg.Model):
    """A folder of Custody's asset specs as assets, asset checks, the DropZone and feed sensors,
    the ledger's maintenance job and the resources they use. A broken spec becomes an asset that
    cannot run, saying why, so the others still load; a check of the definitions fails on it."""

    specs: str | None = None
    """The specs folder, relative to this `defs.yaml`'s folder (default: CUSTODY_SPECS, else the
    project's `assets/specs`)."""

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        settings = Settings.from_env()
        folder = context.path / self.specs if self.specs else settings.specs
        return load_definitions(settings, folder.resolve(), strict=os.environ.get(VALIDATING) == "1")
