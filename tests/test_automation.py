"""A spec's automation: Dagster's Declarative Automation condition it declares, evaluated by the
`custody_automation` sensor, whose runs are for the directory's service account that Dagster's
daemon runs as, decided and recorded like anyone's."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import dagster as dg
import pytest

from assets.dagster_internals import InstigatorType
from assets.definitions import build_definitions
from assets.launch import instance_for
from assets.sensors import AUTOMATION_SENSOR
from governance.catalog import Catalog
from governance.config import DEFAULT_TRANSFORM_PACKAGES
from governance.spec import load_specs
from tests.conftest import DEMO_SPECS
from tests.dagster_servers import finished, start_daemon, stop
from tests.helpers import cli, os_user_is
from tests.test_freshness import problems
from tests.test_launchers import entries

SUMMARY = dg.AssetKey(["sales", "product_summary"])
NAMES = dg.AssetKey(["sales", "names_and_products"])


def automated(tmp_path: Path, lines: str, asset: str = "product_summary") -> Path:
    """The demo's specs, `asset` given `lines` of automation."""
    specs = tmp_path / "specs"
    shutil.copytree(DEMO_SPECS, specs)
    spec = specs / "sales" / f"{asset}.yaml"
    spec.write_text(spec.read_text() + "automation:\n" + lines)
    return specs


@pytest.mark.parametrize(
    ("lines", "condition"),
    [
        ("  on_cron: '0 * * * *'\n", dg.AutomationCondition.on_cron("0 * * * *")),
        ("  eager: true\n", dg.AutomationCondition.eager()),
        ("  on_missing: true\n", dg.AutomationCondition.on_missing()),
    ],
)
def test_a_spec_s_automation_is_its_asset_s_automation_condition(tmp_path, lines, condition):
    defs = build_definitions(automated(tmp_path, lines), transform_packages=DEFAULT_TRANSFORM_PACKAGES)
    graph = defs.resolve_asset_graph()

    assert graph.get(SUMMARY).automation_condition == condition
    assert graph.get(NAMES).automation_condition is None


def test_the_automation_sensor_targets_the_automated_assets_and_runs_by_default(tmp_path):
    defs = build_definitions(automated(tmp_path, "  eager: true\n"), transform_packages=DEFAULT_TRANSFORM_PACKAGES)
    sensor = defs.resolve_sensor_def(AUTOMATION_SENSOR)

    assert isinstance(sensor, dg.AutomationConditionSensorDefinition)
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    assert sensor.asset_selection.resolve(defs.resolve_asset_graph()) == {SUMMARY}


def test_specs_that_declare_no_automation_have_no_automation_sensor():
    defs = build_definitions(DEMO_SPECS, transform_packages=DEFAULT_TRANSFORM_PACKAGES)

    assert AUTOMATION_SENSOR not in {sensor.name for sensor in defs.sensors or ()}


@pytest.mark.parametrize(
    ("cron", "said"),
    [
        ("0 25 * * *", "cron schedule '0 25 * * *': hour '25' is out of its range 0-23"),
        ("0 * * *", "cron schedule '0 * * *' has 4 fields: give 5"),
        ("*/0 * * * *", "minute '*/0' steps by 0"),
        ("0 0 * foo *", "month 'foo' is out of its range 1-12, or jan-dec"),
        ("0 9-5 * * *", "hour '9-5' is a range that ends before it starts"),
    ],
)
def test_a_cron_schedule_dagster_would_not_take_is_refused_naming_the_field(tmp_path, cron, said):
    specs = automated(tmp_path, f"  on_cron: '{cron}'\n")

    [problem] = problems(specs)
    assert problem.startswith(f"{specs / 'sales' / 'product_summary.yaml'}:")
    assert said in problem


def test_names_and_ranges_a_cron_schedule_may_use_are_taken(tmp_path):
    specs = automated(tmp_path, "  on_cron: '15,45 8-18/2 1 jan-jun mon-fri'\n")

    assert load_specs(specs, transform_packages=DEFAULT_TRANSFORM_PACKAGES)


def test_an_automation_gives_one_condition(tmp_path):
    specs = automated(tmp_path, "  eager: true\n  on_missing: true\n")

    assert any("give one of on_cron, eager or on_missing, not 2" in found for found in problems(specs))


def test_a_landing_asset_of_files_takes_no_automation_the_dropzone_sensor_ingests_it(tmp_path):
    specs = automated(tmp_path, "  eager: true\n", asset="products")

    assert any("ingested batch by batch by the DropZone sensor" in found for found in problems(specs))


def test_an_on_cron_automation_materializes_its_asset_as_the_daemon_s_service_account(
    pipeline, cli_env, capsys, tmp_path, monkeypatch
):
    monkeypatch.setenv("CUSTODY_SPECS", str(automated(tmp_path, "  on_cron: '* * * * *'\n")))
    os_user_is(cli_env, "svc-custody")
    # The owner lets the daemon's account run the asset: the roles anyone running it needs.
    for role, asset in (("producer", "sales/product_summary"), ("consumer", "sales/names_and_products")):
        assert cli(capsys, "access", "grant", role, asset, "svc-custody", "--by", "alice")[0] == 0
    instance = instance_for(cli_env)
    daemon = start_daemon(cli_env, "off", {"CUSTODY_AUTOMATION_SECONDS": "2"})
    try:
        # The condition counts a cron tick between two of its evaluations: one before the minute
        # turns, then the input's new version after it.
        until(lambda: sensor_ticks(instance), daemon, "the automation sensor's first tick")
        time.sleep(60 - time.time() % 60 + 1)
        assert cli(capsys, "materialize", "sales/names_and_products", "--as", "bob")[0] == 0
        run = until(lambda: automated_run(instance), daemon, "a run of the automation condition")
        done = finished(instance, run.run_id, daemon)
    finally:
        stop(daemon)

    assert done.is_success
    assert done.tags["custody/requested_by"] == "svc-custody"
    catalog = Catalog.from_settings(cli_env, {})
    [proof] = entries(catalog, run_id=run.run_id, action="authenticate")
    said = json.loads(proof.details)
    assert (proof.actor, said["method"], said["channel"], said["via"]) == (
        "svc-custody",
        "os-user",
        "automation",
        f"sensor {AUTOMATION_SENSOR}",
    )
    [made] = entries(catalog, run_id=run.run_id, action="materialization.committed")
    assert (made.actor, made.asset_key, made.version) == ("svc-custody", "sales/product_summary", 2)


def until(found, daemon, what: str, seconds: float = 180):
    deadline = time.monotonic() + seconds
    while not (value := found()):
        assert daemon.poll() is None, "the Dagster daemon exited"
        assert time.monotonic() < deadline, f"no {what} in {seconds:g} s"
        time.sleep(0.5)
    return value


def sensor_ticks(instance: dg.DagsterInstance) -> list:
    """The automation sensor's last tick, once the daemon has made one."""
    return [
        tick
        for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
        if state.name == AUTOMATION_SENSOR
        for tick in instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=1)
    ]


def automated_run(instance: dg.DagsterInstance) -> dg.DagsterRun | None:
    runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/from_automation_condition": "true"}))
    return runs[0] if runs else None
