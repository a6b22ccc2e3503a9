"""The code location: one Definitions object built from the asset specs."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from assets.factory import build_assets
from governance.config import Settings
from governance.spec import load_specs
from resources import CustodyResource, SparkResource


def build_definitions(specs_dir: Path) -> dg.Definitions:
    """Every spec as an asset; a bad spec stops the load with every problem listed."""
    return dg.Definitions(
        assets=build_assets(load_specs(specs_dir)),
        resources={"custody": CustodyResource(), "spark": SparkResource()},
        executor=dg.in_process_executor,
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions(Settings.from_env().specs)
