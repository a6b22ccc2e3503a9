"""A ledger writer for the crash tests, killed with SIGKILL by its parent at some moment.

    CUSTODY_CATALOG_URL=… crash_ledger.py rollover SEGMENTS   roll the old entries over, a few per segment
    CUSTODY_CATALOG_URL=… crash_ledger.py append              append entries forever, printing each seq once committed

It prints `ready` once imported and connected, so the parent's delay measures the work, not the start-up.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from governance import ledger
from governance.catalog import Catalog
from governance.rollover import rollover


def main(action: str, folder: str = "") -> None:
    # The URL comes through the environment: it may hold a password, which argv would show to `ps`.
    catalog = Catalog.from_url(os.environ["CUSTODY_CATALOG_URL"])
    with catalog.session() as session:
        ledger.last_entry(session)  # connected, so the parent's delay is all work even on a busy machine
    print("ready", flush=True)
    if action == "rollover":
        rollover(catalog, Path(folder), timedelta(days=30), per_segment=5)
        return
    while True:
        with catalog.session() as session:
            appended = ledger.append(session, actor="crash", action="read", details={"pad": "x" * 200})
        print(appended.seq, flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
