"""A crash at any instant leaves a whole version or none, and the next ingestion goes on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from governance.ingest import ingest
from governance.repair import repair, version_problem
from governance.runs import RunRequest
from governance.zones import AssetKey, Zone
from tests.conftest import ROOT, drop
from tests.helpers import all_versions

PEOPLE = AssetKey("t", "people")
ROWS = 400_000


def people_csv(path, rows: int):
    with open(path, "w") as handle:
        handle.write("id,name,score\n")
        handle.writelines(f"{i},person {i},{i * 0.5}\n" for i in range(1, rows + 1))
    return path


@pytest.fixture(scope="module")
def big_csv(tmp_path_factory):
    """Written once: each test copies it into its own DropZone and never changes it."""
    return people_csv(tmp_path_factory.mktemp("big") / "people.csv", ROWS)


def kill_at(home, point, batch_id):
    child = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "crash_child.py"), str(home), point, batch_id],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    while not (home / "reached").exists():
        if child.poll() is not None:
            raise AssertionError(f"child ended before {point}: {child.stderr.read()[-2000:]}")
        assert time.monotonic() < deadline, f"child never reached {point}"
        time.sleep(0.05)
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    (home / "reached").unlink()


# Only a write in progress needs a batch big enough to be caught in its middle.
@pytest.mark.parametrize(("point", "rows"), [("spark-write", ROWS), ("before-commit", 2_000), ("during-commit", 2_000)])
def test_a_killed_ingestion_leaves_no_partial_version(
    spark, settings, catalog, lake, test_specs, big_csv, tmp_path, point, rows
):
    spec = test_specs[PEOPLE]
    request = RunRequest(requested_by="bob")
    drop(lake, "t/people", "b0", {"people.csv": b"id,name,score\n1,ann,1.5\n"})
    ingest(spark, catalog, lake, spec, request, batch_id="b0")
    drop(lake, "t/people", "b1", {"people.csv": big_csv if rows == ROWS else people_csv(tmp_path / "people.csv", rows)})

    kill_at(settings.home, point, "b1")

    report = repair(catalog, lake)
    assert len(report.rolled_back) == 1
    assert set(lake.version_dirs(Zone.LANDING, PEOPLE)) == {1}
    assert lake.staging_attempts() == []
    resumed = ingest(spark, catalog, lake, spec, request, batch_id="b1")
    assert resumed.number == 2 and resumed.rows == rows
    for version in all_versions(catalog):
        assert version_problem(lake, lake.at(version.path), version.data_version) is None
    assert set(lake.version_dirs(Zone.LANDING, PEOPLE)) == {1, 2}
