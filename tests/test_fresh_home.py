"""Commands started at once on a fresh home share one Dagster instance: the first creates its
storage while the others wait, so none fails and the storage is whole."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg

from assets.launch import instance_for
from governance.config import Settings

ROOT = Path(__file__).resolve().parents[1]
CUSTODY = Path(sys.executable).with_name("custody")
AT_ONCE = 4


def test_commands_started_at_once_on_a_fresh_home_all_succeed(tmp_path):
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CUSTODY_", "DAGSTER_"))},
        "CUSTODY_HOME": str(tmp_path / "home"),
    }
    started = [
        subprocess.Popen(
            [str(CUSTODY), "repair"], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(AT_ONCE)
    ]
    finished = [(process.wait(timeout=300), process.stderr.read()) for process in started]
    for process in started:
        process.stdout.close()
        process.stderr.close()
    assert [code for code, _ in finished] == [0] * AT_ONCE, [err[-2000:] for _, err in finished]
    with instance_for(Settings.under(tmp_path / "home")) as instance:
        assert instance.get_runs() == []
        instance.add_run(dg.DagsterRun(job_name="a_job"))  # its storage is whole: one schema, writable
        assert len(instance.get_runs()) == 1


def test_dagster_home_names_the_instance_a_deployment_shares(tmp_path):
    settings = Settings.from_env({"CUSTODY_HOME": str(tmp_path / "home"), "DAGSTER_HOME": str(tmp_path / "dagster")})
    assert settings.dagster_home == tmp_path / "dagster"
    assert Settings.under(tmp_path / "home").dagster_home == tmp_path / "home" / "dagster"
