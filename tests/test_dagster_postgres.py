"""Dagster's own storage on PostgreSQL, as deploy/dagster.yaml sets it up, beside a catalog there too."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
import yaml

from assets.launch import instance_for
from governance.config import Settings
from governance.errors import InvalidInput

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


def test_the_demo_runs_with_the_catalog_and_dagster_on_postgresql(postgres, pg_url, dagster_db, tmp_path):
    home = tmp_path / "home"
    deployed_instance(home, tmp_path)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CUSTODY_", "DAGSTER_"))},
        "CUSTODY_HOME": str(home),
        "CUSTODY_CATALOG_URL": pg_url,
        "DAGSTER_PG_HOST": postgres.host,
        "DAGSTER_PG_PORT": str(postgres.port),
        "DAGSTER_PG_DB": dagster_db,
        "DAGSTER_PG_USER": postgres.user,
        "DAGSTER_PG_PASSWORD": postgres.password,
    }
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
