"""Reads of versions that were not committed when their event came (a job's START naming the
version it is about to read): joined once those versions are, each held to the readers' policy as
a read joined at once is, in one transaction. The service does so as it takes lineage, and
`custody repair` too; meanwhile the run's input says whose version it waits for."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from sqlmodel import Session

from governance import ledger
from governance.catalog import Catalog
from governance.foreign.join import Judge, Outside, Resolved, Sql, outside_entry

# The waiting reads whose version is committed now (or was, and is purged since: it was read), a
# turn's worth, oldest first; and whether the run's read of that version was joined already (the
# run named it another way too), and so judged.
READY = (
    "SELECT io.id, io.run_id, v.id, v.asset_key, v.number, r.job_namespace, r.job_name, r.producer, r.reporter, "
    'r."user", EXISTS (SELECT 1 FROM foreign_io o WHERE o.run_id = io.run_id AND o.version_id = v.id) '
    "FROM foreign_io io JOIN version v ON v.asset_key = io.awaits_asset AND v.number = io.awaits_number "
    "JOIN foreign_run r ON r.run_id = io.run_id WHERE io.awaits_asset IS NOT NULL ORDER BY io.id LIMIT {limit}"
)
# The most reads one turn joins: each may ask the directory, and the turn holds up the intake's thread.
MOST_AT_ONCE = 500
# Conditional: of two processes joining the same read, one does, and records its judgment.
JOINED = (
    "UPDATE foreign_io SET version_id = {version_id}, awaits_asset = NULL, awaits_number = NULL "
    "WHERE id = {id} AND awaits_asset IS NOT NULL"
)
WAITING = (
    "SELECT awaits_asset, awaits_number, COUNT(DISTINCT run_id) FROM foreign_io WHERE awaits_asset IS NOT NULL "
    "GROUP BY awaits_asset, awaits_number ORDER BY awaits_asset, awaits_number"
)


@dataclass(frozen=True)
class Ready:
    """A run's read of a version it named before it was committed, which is committed now."""

    io_id: int
    run_id: str
    version_id: int
    asset: str
    number: int
    job: str
    producer: str
    reporter: str
    user: str | None
    # The run's read of this version was joined already, under another name, and judged then.
    judged: bool = False

    @property
    def ref(self) -> str:
        return f"{self.asset}@{self.number}"


@dataclass(frozen=True)
class Waiting:
    """A version not committed yet that foreign runs said they read, and how many runs."""

    ref: str
    runs: int


def join_waiting(
    catalog: Catalog, judge: Judge, settings: Mapping[str, str] | None = None, limit: int = MOST_AT_ONCE
) -> list[Ready]:
    """Join the waiting reads whose version is committed now, `limit` at most; those this process
    joined (another may have joined some at the same moment). `settings`: the policy settings
    `judge` decides under, as `Catalog.record_then` takes them."""
    with catalog.reading() as session:
        found = ready(session, limit)
    if not found:
        return []
    # Asked before the transaction, once a user and asset: the directory is not asked while
    # holding the catalog's writer.
    asked: dict[tuple[str | None, str], str | None] = {}

    def verdict(read: Ready) -> str | None:
        if read.judged:
            return None
        if (read.user, read.asset) not in asked:
            asked[(read.user, read.asset)] = judge(read.user, read.asset)
        return asked[(read.user, read.asset)]

    judged = [verdict(read) for read in found]
    joined: list[Ready] = catalog.record_then([], joining(found, judged), settings)
    return joined


def ready(session: Session, limit: int = MOST_AT_ONCE) -> list[Ready]:
    rows = Sql(session).run(READY.replace("{limit}", str(int(limit))), {}).fetchall()
    return [
        Ready(
            int(io_id),
            str(run_id),
            int(vid),
            str(asset),
            int(number),
            f"{ns}/{job}",
            producer,
            reporter,
            user,
            bool(seen),
        )
        for io_id, run_id, vid, asset, number, ns, job, producer, reporter, user, seen in rows
    ]


def joining(
    found: Sequence[Ready], judged: Sequence[str | None]
) -> Callable[[Session], tuple[list[Ready], list[ledger.Event]]]:
    """What joins each read still waiting, with the ledger entry of each that `judged` gives a reason."""

    def work(session: Session) -> tuple[list[Ready], list[ledger.Event]]:
        db = Sql(session)
        joined: list[Ready] = []
        entries: list[ledger.Event] = []
        told: set[tuple[str, int]] = set()
        for read, why in zip(found, judged, strict=True):
            if db.run(JOINED, {"version_id": read.version_id, "id": read.io_id}).rowcount != 1:
                continue
            joined.append(read)
            # A run that named the version two ways read it once: one entry.
            if why is not None and (read.run_id, read.version_id) not in told:
                told.add((read.run_id, read.version_id))
                resolved = Resolved(read.version_id, read.asset, read.number)
                outside = Outside(read.run_id, read.job, read.producer, resolved, read.user, why, read.reporter)
                entries.append(outside_entry(outside))
        return joined, entries

    return work


def still_waiting(catalog: Catalog) -> list[Waiting]:
    """The versions foreign runs read that are not committed yet, each with how many runs wait."""
    with catalog.reading() as session:
        rows = Sql(session).run(WAITING, {}).fetchall()
    return [Waiting(f"{asset}@{number}", int(runs)) for asset, number, runs in rows]
