"""Run a real `custody feeds consolidate` and stop dead at a chosen point, for tests/test_feeds_crash.py.

Usage: feed_crash_child.py REACHED POINT, with CUSTODY_HOME and the other settings in the environment.
At POINT the process writes the file REACHED and sleeps; the test then lets it live or SIGKILLs it.
POINT is merge (an hour's archives fetched and merged, the merge not yet uploaded), delete (the merge
uploaded, the archives it holds not yet deleted) or land (an hour's first download unpacked into the
DropZone, the batch not yet moved into place).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import governance.feeds.consolidate as consolidate_module
import governance.feeds.hours as hours_module
from governance.cli import run
from governance.feeds.store import FeedStore


def stop_here(reached: Path) -> None:
    reached.write_text("yes")
    time.sleep(600)


def stop_after_merging(reached: Path) -> None:
    original = consolidate_module.merge

    def merge(*args, **kwargs):
        original(*args, **kwargs)
        stop_here(reached)

    consolidate_module.merge = merge


def stop_before_deleting(reached: Path) -> None:
    FeedStore.delete = lambda *args, **kwargs: stop_here(reached)


def stop_after_the_first_download(reached: Path) -> None:
    original = hours_module.downloads

    def downloads(*args, **kwargs):
        for index, item in enumerate(original(*args, **kwargs)):
            if index == 1:
                stop_here(reached)
            yield item

    hours_module.downloads = downloads


def main() -> None:
    reached, point = Path(sys.argv[1]), sys.argv[2]
    stops = {"merge": stop_after_merging, "delete": stop_before_deleting, "land": stop_after_the_first_download}
    stops[point](reached)
    sys.exit(run(["feeds", "consolidate"]))


if __name__ == "__main__":
    main()
