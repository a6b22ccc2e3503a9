"""Custody's run coordinator: which assets a run writes, and the concurrency limits the queue applies."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest

from assets.coordinator import CustodyRunCoordinator, concurrency_tags, written
from assets.origin import remote_origin
from governance.config import DEFAULT_TRANSFORM_PACKAGES
from governance.errors import SpecError
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


def test_the_limits_are_those_the_runs_waiting_or_in_progress_carry_reading_no_spec(specs_dir):
    overrides = {"run_coordinator": {**COORDINATOR, "config": {}}}
    with dg.instance_for_test(overrides=overrides) as instance:
        coordinator = instance.run_coordinator
        assert coordinator.limits() == []
        instance.add_run(
            dg.DagsterRun(
                job_name="__ASSET_JOB",
                remote_job_origin=remote_origin(),
                status=dg.DagsterRunStatus.QUEUED,
                tags={"custody/writes/sales/clients": "2"},
            )
        )
        shutil.rmtree(specs_dir)

        assert coordinator.limits() == [{"key": "custody/writes/sales/clients", "limit": 2}]


def test_runs_admitted_under_two_limits_count_against_the_lower(specs_dir):
    overrides = {"run_coordinator": {**COORDINATOR, "config": {}}}
    with dg.instance_for_test(overrides=overrides) as instance:
        for limit, status in (("1", dg.DagsterRunStatus.STARTED), ("3", dg.DagsterRunStatus.QUEUED)):
            instance.add_run(
                dg.DagsterRun(
                    job_name="__ASSET_JOB",
                    remote_job_origin=remote_origin(),
                    status=status,
                    tags={"custody/writes/sales/clients": limit},
                )
            )
        instance.add_run(
            dg.DagsterRun(
                job_name="__ASSET_JOB", status=dg.DagsterRunStatus.SUCCESS, tags={"custody/writes/sales/products": "1"}
            )
        )

        assert instance.run_coordinator.limits() == [{"key": "custody/writes/sales/clients", "limit": 1}]


def test_a_run_carries_the_limit_its_spec_declares(specs_dir):
    spec = specs_dir / "sales" / "clients.yaml"
    spec.write_text(spec.read_text() + "max_concurrent_runs: 2\n")
    specs = load_specs(specs_dir, transform_packages=DEFAULT_TRANSFORM_PACKAGES)
    run = dg.DagsterRun(job_name="__ASSET_JOB", asset_selection=frozenset({dg.AssetKey(["sales", "clients"])}))

    assert concurrency_tags(written(run, specs))["custody/writes/sales/clients"] == "2"


def test_a_run_counts_against_each_asset_it_writes_and_their_domain():
    specs = load_specs(DEMO_SPECS, transform_packages=DEFAULT_TRANSFORM_PACKAGES)
    run = dg.DagsterRun(
        job_name="__ASSET_JOB",
        asset_selection=frozenset({dg.AssetKey(["sales", "products"]), dg.AssetKey(["sales", "clients"])}),
    )
    assert concurrency_tags(written(run, specs)) == {
        "custody/writes/sales/clients": "1",
        "custody/writes/sales/products": "1",
        "custody/domain/sales": "1",
    }


def test_a_whole_asset_job_writes_every_asset_and_another_job_none():
    specs = load_specs(DEMO_SPECS, transform_packages=DEFAULT_TRANSFORM_PACKAGES)
    assert len(written(dg.DagsterRun(job_name="__ASSET_JOB"), specs)) == len(specs)
    assert written(dg.DagsterRun(job_name="custody_ledger_maintenance"), specs) == []


def test_a_limit_below_one_is_a_spec_error(specs_dir):
    spec = specs_dir / "sales" / "products.yaml"
    spec.write_text(spec.read_text() + "max_concurrent_runs: 0\n")
    with pytest.raises(SpecError, match="max_concurrent_runs"):
        load_specs(specs_dir, transform_packages=DEFAULT_TRANSFORM_PACKAGES)


def test_a_run_that_ended_no_longer_counts(specs_dir):
    overrides = {"run_coordinator": {**COORDINATOR, "config": {}}}
    with dg.instance_for_test(overrides=overrides) as instance:
        run = instance.add_run(
            dg.DagsterRun(
                job_name="__ASSET_JOB",
                remote_job_origin=remote_origin(),
                status=dg.DagsterRunStatus.STARTED,
                tags={"custody/writes/sales/clients": "1"},
            )
        )
        assert instance.run_coordinator.limits() == [{"key": "custody/writes/sales/clients", "limit": 1}]

        instance.report_run_failed(run)

        assert instance.run_coordinator.limits() == []
