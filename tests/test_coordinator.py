"""Custody's run coordinator: which assets a run writes, the domains' shares the queue applies, and each asset's pool."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import dagster as dg
import pytest

from assets.coordinator import CustodyRunCoordinator, domain_tags, hold_to_their_limits, written
from assets.dagster_internals import pool_limit
from assets.factory import build_assets
from assets.origin import remote_origin
from governance.config import DEFAULT_TRANSFORM_PACKAGES
from governance.errors import EnvironmentProblem, SpecError
from governance.spec import load_specs
from tests.conftest import DEMO_SPECS

COORDINATOR = {"module": "assets.coordinator", "class": "CustodyRunCoordinator"}


@pytest.fixture
def specs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "specs"
    shutil.copytree(DEMO_SPECS, folder)
    monkeypatch.setenv("CUSTODY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CUSTODY_SPECS", str(folder))
    return folder


def queue_limits(config: dict | None = None) -> list[dict]:
    overrides = {"run_coordinator": {**COORDINATOR, "config": config or {}}}
    with dg.instance_for_test(overrides=overrides) as instance:
        assert isinstance(instance.run_coordinator, CustodyRunCoordinator)
        return list(instance.get_concurrency_config().run_queue_config.tag_concurrency_limits)


def test_a_domain_share_is_a_limit_on_the_runs_that_write_its_assets(specs_dir):
    limits = queue_limits(
        {"domain_max_concurrent_runs": {"sales": 2}, "tag_concurrency_limits": [{"key": "team", "limit": 4}]}
    )
    assert {"key": "custody/domain/sales", "limit": 2} in limits
    assert {"key": "team", "limit": 4} in limits


def test_the_queue_s_limits_are_the_domains_shares_reading_no_spec_and_no_run(specs_dir):
    overrides = {"run_coordinator": {**COORDINATOR, "config": {"domain_max_concurrent_runs": {"sales": 2}}}}
    with dg.instance_for_test(overrides=overrides) as instance:
        instance.add_run(
            dg.DagsterRun(job_name="__ASSET_JOB", remote_job_origin=remote_origin(), status=dg.DagsterRunStatus.QUEUED)
        )
        shutil.rmtree(specs_dir)

        assert instance.run_coordinator.limits() == [{"key": "custody/domain/sales", "limit": 2}]


def test_each_asset_is_a_pool_of_its_own():
    specs = load_specs(DEMO_SPECS, transform_packages=DEFAULT_TRANSFORM_PACKAGES)
    pools = {tuple(a.key.path): a.op.pool for a in build_assets(specs)}
    assert pools[("sales", "products")] == "sales/products"
    assert len(set(pools.values())) == len(specs)


def test_admitting_a_run_gives_each_pool_it_writes_the_limit_its_spec_declares_now(specs_dir):
    spec = specs_dir / "sales" / "clients.yaml"
    run = dg.DagsterRun(job_name="__ASSET_JOB", asset_selection=frozenset({dg.AssetKey(["sales", "clients"])}))
    with dg.instance_for_test() as instance:
        for declared in (2, 3):
            spec.write_text(
                re.sub(r"max_concurrent_runs: \d+\n", "", spec.read_text()) + f"max_concurrent_runs: {declared}\n"
            )
            hold_to_their_limits(
                instance, written(run, load_specs(specs_dir, transform_packages=DEFAULT_TRANSFORM_PACKAGES))
            )

            assert pool_limit(instance, "sales/clients") == declared
        assert pool_limit(instance, "sales/products") is None


def test_a_storage_without_pools_holds_no_limit_and_refuses_the_run():
    specs = load_specs(DEMO_SPECS, transform_packages=DEFAULT_TRANSFORM_PACKAGES)
    run = dg.DagsterRun(job_name="__ASSET_JOB", asset_selection=frozenset({dg.AssetKey(["sales", "clients"])}))
    with (
        dg.DagsterInstance.ephemeral() as instance,
        pytest.raises(EnvironmentProblem, match="no concurrency pools.*dagster instance migrate"),
    ):
        hold_to_their_limits(instance, written(run, specs))


def test_a_run_counts_against_the_share_of_each_domain_it_writes_in():
    specs = load_specs(DEMO_SPECS, transform_packages=DEFAULT_TRANSFORM_PACKAGES)
    run = dg.DagsterRun(
        job_name="__ASSET_JOB",
        asset_selection=frozenset({dg.AssetKey(["sales", "products"]), dg.AssetKey(["sales", "clients"])}),
    )
    assert domain_tags(written(run, specs)) == {"custody/domain/sales": "1"}


def test_a_whole_asset_job_writes_every_asset_and_another_job_none():
    specs = load_specs(DEMO_SPECS, transform_packages=DEFAULT_TRANSFORM_PACKAGES)
    assert len(written(dg.DagsterRun(job_name="__ASSET_JOB"), specs)) == len(specs)
    assert written(dg.DagsterRun(job_name="custody_ledger_maintenance"), specs) == []


def test_a_limit_below_one_is_a_spec_error(specs_dir):
    spec = specs_dir / "sales" / "products.yaml"
    spec.write_text(spec.read_text() + "max_concurrent_runs: 0\n")
    with pytest.raises(SpecError, match="max_concurrent_runs"):
        load_specs(specs_dir, transform_packages=DEFAULT_TRANSFORM_PACKAGES)
