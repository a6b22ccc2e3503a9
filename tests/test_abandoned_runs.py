"""A Dagster run whose `custody` process died is marked failed by `custody repair` and by the next launch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest

from assets.launch import instance_for
from assets.runs import locks_dir
from governance.catalog import Catalog
from governance.demo import CLIENTS, PRODUCTS, drop_demo_batches
from governance.zones import Lake
from tests.conftest import ROOT
from tests.helpers import cli

GONE = "the process that ran it"


@dataclass(frozen=True)
class Ingestion:
    """A `custody ingest` in its own process, held mid-ingestion, and its Dagster run."""

    process: subprocess.Popen
    run_id: str

    def kill(self) -> None:
        kill(self.process)


def kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@pytest.fixture
def instance(cli_env) -> dg.DagsterInstance:
    return instance_for(cli_env)


@pytest.fixture
def batches(cli_env):
    return drop_demo_batches(Lake(cli_env.lake))


@pytest.fixture
def ingestion(cli_env, instance, batches, tmp_path) -> Iterator[Ingestion]:
    with held_ingestion(instance, batches, tmp_path) as held:
        yield held


@pytest.fixture
def committed_ingestion(cli_env, instance, batches, tmp_path) -> Iterator[Ingestion]:
    """An ingestion held once its version is committed, before it tells Dagster."""
    with held_ingestion(instance, batches, tmp_path, "after-commit") as held:
        yield held


@contextmanager
def held_ingestion(instance: dg.DagsterInstance, batches, tmp_path: Path, *point: str) -> Iterator[Ingestion]:
    log = tmp_path / "child.log"
    with open(log, "w") as handle:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "run_child.py"), str(CLIENTS), batches.client_batches[0], *point],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            start_new_session=True,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    try:
        yield Ingestion(process, started_run(instance, process, log))
    finally:
        kill(process)


def started_run(instance: dg.DagsterInstance, process: subprocess.Popen, log: Path) -> str:
    deadline = time.monotonic() + 120
    while not (runs := instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))):
        if process.poll() is not None:
            raise AssertionError(f"custody ingest ended before its run started: {log.read_text()[-2000:]}")
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.05)
    [started] = runs
    return started.run_id


def assert_marked_gone(instance: dg.DagsterInstance, run_id: str) -> None:
    assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE
    [failure] = instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    assert GONE in failure.dagster_event.message and "is gone" in failure.dagster_event.message


def test_repair_marks_failed_the_run_of_a_killed_ingestion(ingestion, instance, capsys):
    ingestion.kill()

    code, out, _ = cli(capsys, "repair")

    assert code == 0 and f"marked failed: run {ingestion.run_id}" in out
    assert_marked_gone(instance, ingestion.run_id)


def test_repair_frees_the_slot_of_its_asset_s_pool_that_a_killed_ingestion_held(ingestion, instance, capsys):
    assert holders(instance, "sales/clients", until=[ingestion.run_id]) == [ingestion.run_id]
    ingestion.kill()

    assert cli(capsys, "repair")[0] == 0

    assert holders(instance, "sales/clients") == []


def holders(instance: dg.DagsterInstance, pool: str, until: list[str] | None = None) -> list[str]:
    """The runs holding a slot of the pool; with `until`, once they are those (a step claims its slot
    a moment after its run starts)."""
    deadline = time.monotonic() + 60
    while True:
        held = [slot.run_id for slot in instance.event_log_storage.get_concurrency_info(pool).claimed_slots]
        if until is None or held == until or time.monotonic() > deadline:
            return held
        time.sleep(0.1)


def test_repair_json_lists_only_the_runs_whose_process_is_gone(ingestion, instance, capsys):
    ingestion.kill()
    killed = instance.get_run_by_id(ingestion.run_id)
    # Re-executing a run from the UI copies its tags onto a run that a Dagster run worker executes.
    reexecuted = dg.DagsterRun(
        job_name=killed.job_name,
        run_id=str(uuid.uuid4()),
        status=dg.DagsterRunStatus.STARTED,
        tags={**killed.tags, "dagster/parent_run_id": killed.run_id},
    )
    instance.add_run(reexecuted)

    code, out, _ = cli(capsys, "repair", "--json")

    assert code == 0 and json.loads(out)["failed_runs"] == [ingestion.run_id]
    assert_marked_gone(instance, ingestion.run_id)
    assert instance.get_run_by_id(reexecuted.run_id).status == dg.DagsterRunStatus.STARTED


def test_the_next_launch_marks_failed_the_run_of_a_killed_ingestion(
    spark, ingestion, instance, batches, cli_env, capsys
):
    ingestion.kill()

    code, out, err = cli(capsys, "ingest", str(PRODUCTS), "--batch", batches.products_batch, "--as", "bob")

    assert code == 0 and "committed sales/products@1" in out, err
    assert f"marked failed: run {ingestion.run_id}" in err
    assert_marked_gone(instance, ingestion.run_id)
    assert list(locks_dir(cli_env).iterdir()) == []  # neither the killed run's lock nor its own is left


def test_repair_leaves_alone_a_run_whose_process_is_alive(ingestion, instance, capsys):
    code, out, _ = cli(capsys, "repair", "--json")

    assert code == 0 and json.loads(out)["failed_runs"] == []
    assert ingestion.process.poll() is None
    assert instance.get_run_by_id(ingestion.run_id).status == dg.DagsterRunStatus.STARTED
    assert instance.all_logs(ingestion.run_id, of_type=dg.DagsterEventType.RUN_FAILURE) == []


def test_repair_records_in_dagster_the_version_a_killed_run_committed(committed_ingestion, instance, cli_env, capsys):
    wait_until_committed(cli_env, committed_ingestion)
    committed_ingestion.kill()

    code, out, _ = cli(capsys, "repair")

    assert code == 0, out
    assert f"marked failed: run {committed_ingestion.run_id}" in out
    said = " ".join(out.split())  # lines as long as the terminal is wide
    assert f"recorded in Dagster: {CLIENTS}@1, committed by run {committed_ingestion.run_id}," in said
    latest = instance.get_latest_materialization_event(dg.AssetKey(["sales", "clients"]))
    assert latest is not None and latest.asset_materialization.metadata["custody/version"].value == f"{CLIENTS}@1"
    assert cli(capsys, "repair")[1].strip() == "nothing to repair"


def wait_until_committed(settings, ingestion: Ingestion) -> None:
    catalog = Catalog.from_url(settings.catalog_url)
    deadline = time.monotonic() + 120
    while not catalog.versions(CLIENTS):
        assert ingestion.process.poll() is None, "the ingestion ended before it committed"
        assert time.monotonic() < deadline, "the ingestion never committed"
        time.sleep(0.05)
