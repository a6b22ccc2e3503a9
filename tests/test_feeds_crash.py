"""A consolidation killed at any point leaves folders that the next one, and `custody repair`,
remove once no live process uses them; what it was doing is done again whole."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from governance.batches import ready_batches
from governance.feeds.store import FeedStore
from governance.zones import Lake
from tests.helpers import cli
from tests.test_feeds import FEED, HOUR_START, KEY, archived, feed_spec, make_download, upload_archive

ROOT = Path(__file__).resolve().parents[1]
DOWNLOADS = [make_download(HOUR_START + timedelta(seconds=i), b'{"tick": %d, "price": 1}' % i) for i in range(10)]


@pytest.fixture
def two_archives(cli_env, tmp_path: Path, monkeypatch):
    """The CLI's environment with one feed, whose ended hour has two replicas' archives."""
    monkeypatch.setenv("CUSTODY_SPECS", str(feed_spec(tmp_path / "feed-specs", "https://prices.example/list")))
    store = FeedStore(cli_env.feeds_store)
    upload_archive(tmp_path, store, HOUR_START, DOWNLOADS[:6])
    upload_archive(tmp_path, store, HOUR_START, DOWNLOADS[4:])
    return cli_env


def stopped_at(point: str, reached: Path) -> subprocess.Popen:
    """A `custody feeds consolidate` process, stopped at `point` and alive."""
    child = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "feed_crash_child.py"), str(reached), point],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not reached.exists():
        if child.poll() is not None:
            raise AssertionError(f"child ended before {point}: {child.stderr.read()[-2000:]}")
        assert time.monotonic() < deadline, f"child never reached {point}"
        time.sleep(0.05)
    return child


def left_behind(settings) -> list[str]:
    """What is in the consolidation's work folder and the feed's DropZone, but batches and lock files."""
    lake = Lake(settings.lake)
    places = [settings.feeds_workspace / "consolidating", lake.drop_dir(KEY)]
    found = {path.name for place in places if place.is_dir() for path in place.iterdir()}
    return sorted(name for name in found - set(ready_batches(lake, KEY)) if not name.endswith(".lock"))


@pytest.mark.parametrize("point", ["merge", "delete", "land"])
@pytest.mark.parametrize("cleaner", [["feeds", "consolidate"], ["repair"]], ids=["consolidate", "repair"])
def test_what_a_consolidation_killed_at_any_point_left_is_removed_once_its_process_is_gone(
    two_archives, tmp_path: Path, capsys, point: str, cleaner: list[str]
):
    settings = two_archives
    child = stopped_at(point, tmp_path / "reached")
    try:
        in_use = left_behind(settings)
        assert in_use, "the stopped process works in a folder of its own"
        assert cli(capsys, *cleaner)[0] == 0
        assert set(in_use) <= set(left_behind(settings)), "a live process's folder is left to it"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.communicate()

    code, out, _ = cli(capsys, *cleaner)
    assert code == 0
    assert all(name in out for name in in_use), out
    assert left_behind(settings) == []
    assert cli(capsys, "feeds", "consolidate")[0] == 0
    store = FeedStore(settings.feeds_store)
    assert len(store.archives(FEED, HOUR_START)) == 1
    assert archived(store)[HOUR_START] == sorted(name for name, _ in DOWNLOADS)
    assert len(ready_batches(Lake(settings.lake), KEY)) == 1
