"""Dagster's own storage on PostgreSQL, as deploy/dagster.yaml sets it up, beside a catalog there too;
two hosts sharing it hold each asset to its limit."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import psycopg
import pytest
import yaml

from assets.launch import BLOCKED_BY_POOL, instance_for
from governance.catalog import Catalog
from governance.config import Settings
from governance.demo import demo_password, drop_demo_batches
from governance.errors import InvalidInput
from governance.zones import Lake
from tests.conftest import DEMO_SPECS
from tests.helpers import step_times

ROOT = Path(__file__).resolve().parents[1]
CUSTODY = Path(sys.executable).with_name("custody")
EXAMPLE = ROOT / "deploy" / "dagster.yaml"


@pytest.fixture
def dagster_db(postgres):
    name = f"d_{uuid.uuid4().hex[:12]}"
    postgres.create_database(name)
    yield name
    postgres.drop_database(name)


def deployed_instance(home: Path, tmp_path: Path) -> None:
    """deploy/dagster.yaml, as an operator adapts it: no TLS to the throwaway server, logs in tmp_path."""
    config = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    config["storage"]["postgres"]["postgres_db"]["params"] = {"sslmode": "disable"}
    config["compute_logs"]["config"]["base_dir"] = str(tmp_path / "compute-logs")
    (home / "dagster").mkdir(parents=True)
    (home / "dagster" / "dagster.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")


def on_postgresql(postgres, dagster_db: str) -> dict[str, str]:
    """The variables deploy/dagster.yaml reads to reach Dagster's database."""
    return {
        "DAGSTER_PG_HOST": postgres.host,
        "DAGSTER_PG_PORT": str(postgres.port),
        "DAGSTER_PG_DB": dagster_db,
        "DAGSTER_PG_USER": postgres.user,
        "DAGSTER_PG_PASSWORD": postgres.password,
    }


def host_environ(home: Path) -> dict[str, str]:
    """A host's environment: this one's, less every Custody and Dagster setting, with its own home."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CUSTODY_", "DAGSTER_"))},
        "CUSTODY_HOME": str(home),
    }


def test_the_demo_runs_with_the_catalog_and_dagster_on_postgresql(postgres, pg_url, dagster_db, tmp_path):
    home = tmp_path / "home"
    deployed_instance(home, tmp_path)
    env = {**host_environ(home), "CUSTODY_CATALOG_URL": pg_url, **on_postgresql(postgres, dagster_db)}
    done = subprocess.run(
        [str(CUSTODY), "demo"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert postgres.password not in done.stdout + done.stderr
    dsn = f"host={postgres.host} port={postgres.port} user={postgres.user} password={postgres.password} dbname={dagster_db}"
    with psycopg.connect(dsn) as connection:
        statuses = [row[0] for row in connection.execute("SELECT status FROM runs")]
        materialized = connection.execute(
            "SELECT count(*) FROM event_logs WHERE dagster_event_type = 'ASSET_MATERIALIZATION'"
        ).fetchone()[0]
    assert statuses and set(statuses) == {"SUCCESS"}
    assert materialized >= 4
    assert not (home / "dagster" / "history").exists()  # nothing went to SQLite beside it


def test_a_psycopg3_url_for_dagsters_storage_is_refused_before_anything_runs(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / "dagster").mkdir(parents=True)
    (home / "dagster" / "dagster.yaml").write_text(
        "storage:\n  postgres:\n    postgres_url: {env: DAGSTER_PG_URL}\n", encoding="utf-8"
    )
    monkeypatch.setenv("DAGSTER_PG_URL", "postgresql+psycopg://u:s3cret@db:5432/dagster")
    with pytest.raises(
        InvalidInput,
        match="storage.postgres names postgresql\\+psycopg://, but Dagster's PostgreSQL storage runs on psycopg2 only",
    ) as refused:
        instance_for(Settings.under(home))
    assert "s3cret" not in str(refused.value)


def test_postgres_db_without_the_psycopg2_scheme_is_refused(tmp_path):
    home = tmp_path / "home"
    (home / "dagster").mkdir(parents=True)
    (home / "dagster" / "dagster.yaml").write_text(
        "storage:\n  postgres:\n    postgres_db: {hostname: db, db_name: dagster, username: u, password: {env: PW}}\n",
        encoding="utf-8",
    )
    with pytest.raises(InvalidInput, match="storage.postgres names postgresql://"):
        instance_for(Settings.under(home))


POOL = "sales/products"
ANOTHER_HOST_S_RUN = "run-of-another-host"


def test_two_hosts_sharing_dagster_s_storage_never_write_an_asset_beyond_its_limit(
    postgres, pg_url, dagster_db, tmp_path, monkeypatch
):
    """Each host has its own home (its own files and locks) and shares Dagster's database, the
    catalog, the ledger's checkpoints and the lake. A third holds sales/products' one slot while both hosts' ingestions wait
    for it, then frees it: the two take it one after the other."""
    lake = tmp_path / "lake"
    shared = {
        "CUSTODY_LAKE": str(lake),
        "CUSTODY_LEDGER_CHECKPOINTS": str(tmp_path / "ledger"),
        "CUSTODY_CATALOG_URL": pg_url,
        "CUSTODY_SPECS": str(DEMO_SPECS),
        "CUSTODY_SPECS_APPROVAL": "off",
        "CUSTODY_PASSWORD": demo_password("bob"),
        **on_postgresql(postgres, dagster_db),
    }
    homes = [tmp_path / "host-a", tmp_path / "host-b"]
    for home in homes:
        deployed_instance(home, tmp_path)
    for name, value in {**shared, "CUSTODY_HOME": str(homes[0])}.items():
        monkeypatch.setenv(name, value)
    Catalog.from_settings(Settings.from_env(), os.environ)  # its tables, made before the hosts start at once
    batches = [drop_demo_batches(Lake(str(lake))).products_batch for _ in homes]
    with instance_for(Settings.from_env()) as instance:
        storage = instance.event_log_storage
        storage.set_concurrency_slots(POOL, 1)
        assert storage.claim_concurrency_slot(POOL, ANOTHER_HOST_S_RUN, "sales__products").is_claimed
        with ingesting(homes, batches, shared, tmp_path) as hosts:
            waiting = blocked_runs(instance, hosts, count=2)
            storage.free_concurrency_slot_for_step(ANOTHER_HOST_S_RUN, "sales__products")
            for host in hosts:
                host.wait(timeout=600)
        outputs = [(tmp_path / f"{home.name}.log").read_text() for home in homes]
        assert [host.returncode for host in hosts] == [0, 0], outputs
        assert all(
            f"sales/products: waiting: other runs write it up to its limit (pool {POOL})" in out for out in outputs
        )
        first, second = sorted(step_times(instance, run_id) for run_id in waiting)
        assert first[1] <= second[0]
        assert storage.get_concurrency_info(POOL).claimed_slots == []


@contextmanager
def ingesting(
    homes: list[Path], batches: list[str], shared: dict[str, str], logs: Path
) -> Iterator[list[subprocess.Popen]]:
    """`custody ingest sales/products` as bob on each host at once, each of its own batch."""
    hosts = []
    try:
        for home, batch in zip(homes, batches, strict=True):
            with open(logs / f"{home.name}.log", "w") as log:
                hosts.append(
                    subprocess.Popen(
                        [str(CUSTODY), "ingest", POOL, "--batch", batch, "--as", "bob"],
                        env={**host_environ(home), **shared},
                        cwd=ROOT,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
        yield hosts
    finally:
        for host in hosts:
            if host.poll() is None:
                host.kill()
                host.wait()


def blocked_runs(instance: dg.DagsterInstance, hosts: list[subprocess.Popen], count: int) -> list[str]:
    """The runs whose step says it waits for a slot of the pool, once `count` of them do."""
    deadline = time.monotonic() + 300
    while True:
        blocked = [
            run.run_id
            for run in instance.get_runs()
            if any(
                entry.user_message.startswith(f"{BLOCKED_BY_POOL} {POOL}") for entry in instance.all_logs(run.run_id)
            )
        ]
        if len(blocked) == count:
            return blocked
        assert all(host.poll() is None for host in hosts), "an ingestion ended before its step waited"
        assert time.monotonic() < deadline, f"{len(blocked)} of {count} runs waited for the pool"
        time.sleep(0.5)
