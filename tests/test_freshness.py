"""A spec's freshness: how old its asset's newest version may grow, given to Dagster as its
time-window freshness policy, and checked like every other field."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import dagster as dg
import pytest

from assets.definitions import build_definitions
from governance.config import DEFAULT_TRANSFORM_PACKAGES
from governance.errors import SpecError
from governance.spec import load_specs
from tests.conftest import DEMO_SPECS


def with_freshness(tmp_path: Path, lines: str) -> Path:
    """The demo's specs, sales/products given `lines` of freshness."""
    specs = tmp_path / "specs"
    shutil.copytree(DEMO_SPECS, specs)
    products = specs / "sales" / "products.yaml"
    products.write_text(products.read_text() + "freshness:\n" + lines)
    return specs


def problems(specs: Path) -> list[str]:
    with pytest.raises(SpecError) as raised:
        load_specs(specs, transform_packages=DEFAULT_TRANSFORM_PACKAGES)
    return [str(problem) for problem in raised.value.problems]


def test_a_spec_s_freshness_is_the_asset_s_time_window_freshness_policy(tmp_path):
    specs = with_freshness(tmp_path, "  max_lag: 24h\n  warn_lag: 90m\n")

    graph = build_definitions(specs, transform_packages=DEFAULT_TRANSFORM_PACKAGES).resolve_asset_graph()

    policy = graph.get(dg.AssetKey(["sales", "products"])).freshness_policy
    assert isinstance(policy, dg.FreshnessPolicy)
    assert (policy.fail_window.to_timedelta(), policy.warn_window.to_timedelta()) == (
        timedelta(hours=24),
        timedelta(minutes=90),
    )
    assert graph.get(dg.AssetKey(["sales", "clients"])).freshness_policy is None


def test_a_lag_in_another_form_is_refused_naming_the_field_and_the_form(tmp_path):
    specs = with_freshness(tmp_path, "  max_lag: 1 day\n")

    assert (
        f"{specs / 'sales' / 'products.yaml'}:20: freshness.max_lag: must be a lag as a whole number of minutes, "
        "hours or days: 90m, 24h, 7d, found '1 day'"
    ) in problems(specs)


def test_a_warning_lag_no_shorter_than_the_maximum_is_refused(tmp_path):
    specs = with_freshness(tmp_path, "  max_lag: 12h\n  warn_lag: 1d\n")

    assert any("freshness: warn_lag (1d) must be shorter than max_lag (12h)" in found for found in problems(specs))
