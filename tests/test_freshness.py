"""A spec's freshness: how old its asset's newest version may grow, given to Dagster as its
time-window freshness policy (which Dagster folds into the asset's health), and checked like every
other field. Time is frozen with Dagster's own test clock."""

from __future__ import annotations

import asyncio
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from assets.dagster_internals import (
    AssetFreshnessHealthState,
    AssetHealthStatus,
    LoadingContextForTest,
    TimeWindowFreshnessPolicyEvaluator,
    freeze_time,
)
from assets.definitions import build_definitions
from governance.config import DEFAULT_TRANSFORM_PACKAGES
from governance.errors import SpecError
from governance.spec import load_specs
from tests.conftest import DEMO_SPECS

PRODUCTS = dg.AssetKey(["sales", "products"])


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

    policy = graph.get(PRODUCTS).freshness_policy
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


def health_at(instance: dg.DagsterInstance, node: Any, moment: datetime) -> Any:
    """The asset's freshness health as Dagster's own evaluator and health model give it at `moment`."""
    with freeze_time(moment):
        state = asyncio.run(
            TimeWindowFreshnessPolicyEvaluator().evaluate_freshness(LoadingContextForTest(instance), node)
        )
    return AssetFreshnessHealthState(freshness_state=state).health_status


def test_the_asset_s_health_warns_then_degrades_as_its_newest_version_ages(tmp_path):
    specs = with_freshness(tmp_path, "  max_lag: 24h\n  warn_lag: 12h\n")
    node = build_definitions(specs, transform_packages=DEFAULT_TRANSFORM_PACKAGES).resolve_asset_graph().get(PRODUCTS)
    committed = datetime(2026, 11, 27, 6, 0, tzinfo=UTC)
    with dg.instance_for_test() as instance:
        with freeze_time(committed):
            instance.report_runless_asset_event(dg.AssetMaterialization(PRODUCTS))

        assert health_at(instance, node, committed + timedelta(hours=1)) == AssetHealthStatus.HEALTHY
        assert health_at(instance, node, committed + timedelta(hours=13)) == AssetHealthStatus.WARNING
        assert health_at(instance, node, committed + timedelta(hours=25)) == AssetHealthStatus.DEGRADED
