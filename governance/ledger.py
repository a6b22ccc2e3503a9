"""The append-only, hash-chained ledger: every event of the system, in one gap-free sequence."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import cache
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any, NamedTuple

from sqlalchemy import func, insert, text, update
from sqlalchemy import select as select_columns
from sqlmodel import Session, col, select
from sqlmodel.sql.expression import SelectOfScalar

from governance.catalog.jsonrows import json_array_sql, marker
from governance.catalog.ledgerfilter import SHORTEST_RUN_PREFIX, LedgerFilter, timestamp
from governance.catalog.models import (
    ArchivedEntry,
    LedgerEntry,
    LedgerHead,
    LedgerHorizon,
    LedgerSegmentRow,
)
from governance.checkpoints import Checkpoints, Head
from governance.errors import IntegrityError, InvalidInput
from governance.locks import advisory_lock
from governance.segments import TornSegment, open_segment, opened

GENESIS = "0" * 64
# session.info keys: (first seq, last seq, last hash) of the entries a transaction appended, and
# (transaction, last seq, last hash) of the chain's tail as that transaction left it
APPENDED = "custody.ledger.appended"
TAIL = "custody.ledger.tail"
CHECKPOINTS = "custody.ledger.checkpoints"  # the session's checkpoint file, whose key signs a new ledger's head
LEDGER_LOCK = "custody.ledger"  # the advisory lock appends take
SEGMENTS = "custody.ledger.segments"  # the session's folder of segment files
EVERY_ENTRY = LedgerFilter()  # a filter that names nothing
# How far this host's clock may be behind the ledger's newest entry before it is recorded: other
# hosts' clocks differ by a little, and entries are only ever stamped at the ledger's time or later.
CLOCK_TOLERANCE = timedelta(seconds=1)
# The ledger time this process last found its clock behind of, and said so.
_behind_of: list[str] = []


class Action:
    INGESTION_REQUESTED = "ingestion.requested"
    INGESTION_COMMITTED = "ingestion.committed"
    INGESTION_FAILED = "ingestion.failed"
    ROWS_QUARANTINED = "rows.quarantined"
    MATERIALIZATION_REQUESTED = "materialization.requested"
    MATERIALIZATION_COMMITTED = "materialization.committed"
    MATERIALIZATION_FAILED = "materialization.failed"
    MATERIALIZATION_UNCHANGED = "materialization.unchanged"
    ATTEMPT_ROLLED_BACK = "attempt.rolled_back"
    SPEC_REGISTERED = "spec.registered"
    SPEC_CHANGED = "spec.changed"
    SPEC_APPLIED = "spec.applied"
    SPEC_RETIRED = "spec.retired"
    STATUS_CHANGED = "version.status_changed"
    VERSION_PURGED = "version.purged"
    TABLE_SNAPSHOT_FAILED = "table.snapshot_failed"
    TABLE_GUARD_RESTORED = "table.guard_restored"
    MEMBER_ADDED = "member.added"
    MEMBER_REMOVED = "member.removed"
    LEDGER_AGED_OFF = "ledger.aged_off"
    SETTINGS_PINNED = "settings.pinned"
    SETTINGS_CHANGED = "settings.changed"
    SETTINGS_REFUSED = "settings.refused"
    FEED_REFUSED = "feed.refused"
    FEED_DELETED = "feed.deleted"
    PASSWORD_CHANGED = "password.changed"
    SESSION_ENDED = "session.ended"
    CLOCK_STEPPED_BACK = "clock.stepped_back"
    STREAM_TOPIC_CREATED = "stream.topic_created"
    STREAM_ACL_ADDED = "stream.acl_added"
    STREAM_ACL_REMOVED = "stream.acl_removed"
    STREAM_CREDENTIAL_SET = "stream.credential_set"
    STREAM_CREDENTIAL_REFUSED = "stream.credential_refused"
    STREAM_CREDENTIAL_REMOVED = "stream.credential_removed"
    STREAM_GAP = "stream.gap"


# A run's id whole (a UUID), and how many of the runs a beginning of ids names are shown.
RUN_ID_LENGTH = 36
AMBIGUOUS_SHOWN = 5
HASHED = ("seq", "ts", "actor", "action", "asset_key", "version", "run_id", "details", "assurance")


def entry_hash(prev_hash: str, entry: LedgerEntry) -> str:
    return row_hash(prev_hash, {name: getattr(entry, name) for name in HASHED})


def row_hash(prev_hash: str, row: Mapping[str, Any]) -> str:
    """The chain hash of a ledger row (its columns by name) after the entry whose hash is `prev_hash`."""
    return hashlib.sha256(f"{prev_hash}\n{hashed_body(row)}".encode()).hexdigest()


# The canonical JSON: sorted keys, no spaces. One encoder for every entry: building one per call, as
# json.dumps does for these options, costs more than encoding a short entry.
CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
DETAILS = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)
_SCALARS = (str, int, type(None))


def hashed_body(row: Mapping[str, Any]) -> str:
    """The hashed columns as canonical JSON. Written out here for the strings, integers and nulls
    that ledger columns hold, which takes half the time of the general encoder; exactly its output."""
    assurance = row.get("assurance")
    values = (
        row["action"],
        row["actor"],
        row["asset_key"],
        assurance,
        row["details"],
        row["run_id"],
        row["seq"],
        row["ts"],
        row["version"],
    )
    if any(type(value) not in _SCALARS for value in values):
        return CANONICAL.encode(_hashed_fields(row))
    # entries written before assurance was kept hash as they did: without it
    kept = "" if assurance is None else f'"assurance":{_scalar(assurance)},'
    return (
        f'{{"action":{_scalar(row["action"])},"actor":{_scalar(row["actor"])},"asset":{_scalar(row["asset_key"])},'
        f'{kept}"details":{_scalar(row["details"])},"run_id":{_scalar(row["run_id"])},"seq":{_scalar(row["seq"])},'
        f'"ts":{_scalar(row["ts"])},"version":{_scalar(row["version"])}}}'
    )


def _scalar(value: str | int | None) -> str:
    if value is None:
        return "null"
    return encode_basestring_ascii(value) if type(value) is str else int.__repr__(value)


def _hashed_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    fields = {
        "seq": row["seq"],
        "ts": row["ts"],
        "actor": row["actor"],
        "action": row["action"],
        "asset": row["asset_key"],
        "version": row["version"],
        "run_id": row["run_id"],
        "details": row["details"],
    }
    if row.get("assurance") is not None:
        fields["assurance"] = row["assurance"]
    return fields


class Appended(NamedTuple):
    """Where an entry went in the chain."""

    seq: int
    hash: str


@dataclass(frozen=True)
class Event:
    """One entry to append: who did what, to which asset version, in which run, and how we know who."""

    actor: str
    action: str
    asset: str | None = None
    version: int | None = None
    run_id: str | None = None
    details: Mapping[str, Any] | None = None
    assurance: str | None = None


def append(
    session: Session,
    *,
    actor: str,
    action: str,
    asset: str | None = None,
    version: int | None = None,
    run_id: str | None = None,
    details: Mapping[str, Any] | None = None,
    assurance: str | None = None,
) -> Appended:
    """Add one entry inside the caller's transaction; it commits or vanishes with it."""
    return append_many(session, [Event(actor, action, asset, version, run_id, details, assurance)])[0]


def append_many(session: Session, events: Sequence[Event]) -> list[Appended]:
    """Add entries in order inside the caller's transaction, in one statement.

    The first append of a transaction takes the ledger's write lock (SQLite's, held since BEGIN
    IMMEDIATE; an advisory lock on PostgreSQL) and reads the chain's tail; later ones continue from
    the tail this transaction wrote.
    """
    if not events:
        return []
    seq, prev, last_ts = _tail(session)
    if seq == 0:
        _name_ledger(session)
    clock = datetime.now(UTC)
    # Never before the entry it follows: a time filter finds an entry exactly where its seq puts it.
    ts = max(timestamp(clock), last_ts or "")
    warning = _stepped_back(clock, last_ts)
    rows = []
    for event in [*warning, *events]:
        seq += 1
        row: dict[str, Any] = {
            "seq": seq,
            "ts": ts,
            "actor": event.actor,
            "action": event.action,
            "asset_key": event.asset,
            "version": event.version,
            "run_id": event.run_id,
            "details": DETAILS.encode(event.details or {}),
            "prev_hash": prev,
            "assurance": str(event.assurance) if event.assurance is not None else None,
        }
        row["hash"] = prev = row_hash(row["prev_hash"], row)
        rows.append(row)
    # The driver's own executemany: the ORM's unit of work, or even Core's parameter processing, costs
    # more per entry than SQLite's insert itself.
    connection = session.connection()
    connection.exec_driver_sql(
        _insert_sql(connection.dialect.paramstyle), [tuple(row[c] for c in COLUMNS) for row in rows]
    )
    session.info[TAIL] = (id(session.get_transaction()), seq, prev, ts)
    first = session.info.get(APPENDED, (rows[0]["seq"],))[0]
    session.info[APPENDED] = (first, seq, prev)
    return [Appended(row["seq"], row["hash"]) for row in rows[len(warning) :]]


def _stepped_back(clock: datetime, last_ts: str | None) -> list[Event]:
    """The warning to record first when this host's clock is behind the ledger's newest entry, once
    for each ledger time this process finds it behind of."""
    if last_ts is None or timestamp(clock + CLOCK_TOLERANCE) >= last_ts or last_ts in _behind_of:
        return []
    _behind_of[:] = [last_ts]
    behind = datetime.fromisoformat(last_ts) - clock
    return [
        Event(
            actor="system",
            action=Action.CLOCK_STEPPED_BACK,
            assurance="system",
            details={
                "clock": timestamp(clock),
                "ledger_time": last_ts,
                "behind_seconds": round(behind.total_seconds(), 3),
                "note": "entries are stamped with the ledger's time until this clock catches up",
            },
        )
    ]


def mark(session: Session) -> tuple[Any, Any]:
    """Where this transaction's appends have reached: `rewind` goes back there once a savepoint has
    undone the entries appended since."""
    return session.info.get(TAIL), session.info.get(APPENDED)


def rewind(session: Session, reached: tuple[Any, Any]) -> None:
    for key, value in zip((TAIL, APPENDED), reached, strict=True):
        if value is None:
            session.info.pop(key, None)
        else:
            session.info[key] = value


TAIL_SQL = f"SELECT seq, hash, ts FROM {LedgerEntry.__tablename__} ORDER BY seq DESC LIMIT 1"
COLUMNS = (
    "seq",
    "ts",
    "actor",
    "action",
    "asset_key",
    "version",
    "run_id",
    "details",
    "prev_hash",
    "hash",
    "assurance",
)


@cache
def _insert_sql(paramstyle: str) -> str:
    placeholder = "?" if paramstyle == "qmark" else "%s"
    return f"INSERT INTO ledger ({', '.join(COLUMNS)}) VALUES ({', '.join([placeholder] * len(COLUMNS))})"


def lock(session: Session) -> None:
    """Take the ledger's write lock for the session's transaction, as its first append does: what
    the transaction reads after it, another that appends cannot change before this one ends."""
    advisory_lock(session, LEDGER_LOCK)


def _tail(session: Session) -> tuple[int, str, str | None]:
    """The seq, hash and time of the ledger's newest entry (no time once it was aged off)."""
    cached = session.info.get(TAIL)
    if cached and cached[0] == id(session.get_transaction()):
        return cached[1], cached[2], cached[3]
    lock(session)
    # Written for the driver: every decision's append reads the tail, and building the query costs
    # more than running it.
    last = session.connection().exec_driver_sql(TAIL_SQL).first()
    if last is not None:
        return last.seq, last.hash, last.ts
    archived = session.exec(select(LedgerSegmentRow).order_by(col(LedgerSegmentRow.last_seq).desc()).limit(1)).first()
    if archived is not None:
        return archived.last_seq, archived.last_hash, archived.last_ts
    horizon = session.exec(select(LedgerHorizon).order_by(col(LedgerHorizon.seq).desc()).limit(1)).first()
    return (horizon.seq, horizon.hash, None) if horizon else (0, GENESIS, None)


def _name_ledger(session: Session) -> None:
    """Give a ledger its name with its first entry: the genesis line of its checkpoint file will
    carry it. The head, signed from the start, says the file holds no line yet."""
    if session.get(LedgerHead, 1) is not None:
        return
    checkpoints: Checkpoints | None = session.info.get(CHECKPOINTS)
    name = uuid.uuid4().hex
    mac = checkpoints.head_mac(name, 0, "") if checkpoints else None
    session.add(LedgerHead(ledger_id=name, mac=mac, updated_at=datetime.now(UTC)))


def head(session: Session) -> Head | None:
    """The catalog's record of the ledger's checkpoint file."""
    columns = select_columns(  # more columns than SQLModel's select takes
        col(LedgerHead.ledger_id),
        col(LedgerHead.lines),
        col(LedgerHead.last_line),
        col(LedgerHead.mac),
        col(LedgerHead.file_bytes),
    )
    row = session.connection().execute(columns.where(col(LedgerHead.id) == 1)).first()
    return None if row is None else Head(*row)


def keep_head(session: Session, kept: Head) -> None:
    """Record the checkpoint file's new head: one statement, as a checkpoint is written often."""
    values = {
        "ledger_id": kept.ledger,
        "lines": kept.lines,
        "last_line": kept.last_line,
        "mac": kept.mac,
        "file_bytes": kept.size,
        "updated_at": datetime.now(UTC),
    }
    connection = session.connection()
    if connection.execute(update(LedgerHead).where(col(LedgerHead.id) == 1).values(values)).rowcount == 0:
        connection.execute(insert(LedgerHead).values(id=1, **values))


def last_entry(session: Session) -> LedgerEntry | None:
    return session.exec(select(LedgerEntry).order_by(col(LedgerEntry.seq).desc()).limit(1)).first()


def entries(session: Session, where: LedgerFilter = EVERY_ENTRY) -> list[LedgerEntry]:
    """The entries that match, in seq order: those rolled into segments first (found through their
    searchable columns, read from their files), then those of the hot table."""
    where = whole_run(session, where)
    return _then_hot(session, where, _archived(session, where))


def whole_run(session: Session, where: LedgerFilter) -> LedgerFilter:
    """`where`, its run id whole when it gives the beginning of one, as Custody prints run ids
    (`run 01a23381c4`): InvalidInput when that beginning is several runs', or too short to tell."""
    given = where.run_id
    if given is None or len(given) >= RUN_ID_LENGTH:
        return where
    if len(given) < SHORTEST_RUN_PREFIX:
        raise InvalidInput(f"run {given!r}: give at least {SHORTEST_RUN_PREFIX} characters of a run's id")
    found: set[str] = set()
    for table in (LedgerEntry, ArchivedEntry):
        column = col(table.run_id)
        query = select(column).where(func.substr(column, 1, len(given)) == given).distinct().limit(AMBIGUOUS_SHOWN)
        found.update(run for run in session.exec(query) if run is not None)
    if len(found) > 1:
        named = ", ".join(sorted(found)[:AMBIGUOUS_SHOWN])
        raise InvalidInput(f"run {given} is the beginning of several runs' ids ({named}): give more of it")
    return replace(where, run_id=found.pop()) if found else where


class JsonPage(NamedTuple):
    """A page of entries as a JSON array, and how many it holds."""

    json: str
    entries: int

    def full(self, where: LedgerFilter) -> bool:
        """Whether the page holds as many entries as `where` asks for. Such a page never changes
        (a new entry comes after all of them) until age-off deletes some of it."""
        return where.limit is not None and self.entries == where.limit


def entries_json(session: Session, where: LedgerFilter = EVERY_ENTRY) -> JsonPage:
    """`entries` as a JSON array of objects, each entry's details an object, and how many: built by
    the database in one row when none of them was rolled into a segment."""
    where = whole_run(session, where)
    connection = session.connection()
    dialect = connection.dialect.name
    condition, params = _condition(where, marker(dialect))
    if where.limit is not None:
        params["limit"] = where.limit
    limit = "" if where.limit is None else " LIMIT " + marker(dialect).format("limit")
    columns = ", ".join(f'"{column}"' for column in COLUMNS)
    hot = f"SELECT {columns} FROM {LedgerEntry.__tablename__} WHERE {condition} ORDER BY seq{limit}"
    page = json_array_sql(dialect, hot, COLUMNS, "seq", json_columns=("details",))
    counted = f"SELECT count(*) FROM ({hot}) AS counted"
    archived = f"SELECT EXISTS (SELECT 1 FROM {ArchivedEntry.__tablename__} WHERE {condition})"
    # One statement, one wait for the interpreter: whether segments hold some, and the page and its
    # count if none do.
    rolled, found, count = connection.exec_driver_sql(f"SELECT ({archived}), ({page}), ({counted})", params).one()
    if rolled:
        found = entries(session, where)
        return JsonPage(json.dumps([entry_dict(entry) for entry in found]), len(found))
    return JsonPage(str(found), count)


def entry_dict(entry: LedgerEntry) -> dict[str, Any]:
    """An entry as JSON gives it: its details an object, not the text they are kept as; its fields in
    the order of the database's pages (`entries_json`), so that every way of reading agrees."""
    data = entry.model_dump(mode="json")
    data["details"] = json.loads(entry.details)
    return {column: data[column] for column in COLUMNS}


def entry_from_dict(data: Mapping[str, Any]) -> LedgerEntry:
    """The entry `entry_dict` gave, as the service sends it."""
    return LedgerEntry.model_validate({**data, "details": json.dumps(data["details"])})


def _then_hot(session: Session, where: LedgerFilter, archived: list[LedgerEntry]) -> list[LedgerEntry]:
    """The entries found in segments, then those of the hot table, up to the filter's limit."""
    if where.limit is not None and len(archived) == where.limit:
        return archived
    return archived + list(session.exec(_hot(where, len(archived))))


def _hot(where: LedgerFilter, taken: int) -> SelectOfScalar[LedgerEntry]:
    """The query of the hot table's entries that match, after `taken` found in segments."""
    query = _filtered(select(LedgerEntry), where).order_by(col(LedgerEntry.seq))
    return query if where.limit is None else query.limit(where.limit - taken)


def _filtered(query, where: LedgerFilter):
    condition, params = _condition(where, ":{}")
    return query.where(text(condition).bindparams(**params))


def _condition(where: LedgerFilter, mark: str) -> tuple[str, dict[str, Any]]:
    """The filter as SQL over the searchable columns (the hot table's and the archive's alike), with
    its parameters, each written as `mark` formats its name."""
    params: dict[str, Any] = {"from_seq": where.from_seq}
    clauses = ["seq >= " + mark.format("from_seq")]
    for column, value in (
        ("asset_key", where.asset),
        ("version", where.version),
        ("actor", where.actor),
        ("run_id", where.run_id),
    ):
        if value is not None:
            clauses.append(f"{column} = " + mark.format(column))
            params[column] = value
    if where.since is not None:
        clauses.append("ts >= " + mark.format("since"))
        params["since"] = where.since
    if where.until is not None:
        clauses.append("ts < " + mark.format("until"))
        params["until"] = where.until
    if where.action is not None:
        # `ingestion` means every ingestion.* action, as `read` means the read decisions. Compared as
        # written, on both backends: SQLite's LIKE would ignore case.
        family = f"{where.action}."
        clauses.append(
            f"(action = {mark.format('action')} OR substr(action, 1, {len(family)}) = {mark.format('family')})"
        )
        params.update(action=where.action, family=family)
    return " AND ".join(clauses), params


def _archived(session: Session, where: LedgerFilter) -> list[LedgerEntry]:
    query = _filtered(select(ArchivedEntry.seq), where).order_by(col(ArchivedEntry.seq))
    if where.limit is not None:
        query = query.limit(where.limit)
    # Through the connection: the ORM costs more than the query, which finds nothing most times.
    seqs = list(session.connection().execute(query).scalars())
    if not seqs:
        return []
    rows = session.exec(
        select(LedgerSegmentRow).where(LedgerSegmentRow.last_seq >= seqs[0], LedgerSegmentRow.first_seq <= seqs[-1])
    )
    found: dict[int, dict[str, Any]] = {}
    for row in rows:
        segment = opened(segment_file(session, row))  # verify re-reads every file; queries may trust the cache
        found.update(segment.entries_at(seq for seq in seqs if segment.first_seq <= seq <= segment.last_seq))
    missing = [seq for seq in seqs if seq not in found]
    if missing:
        raise IntegrityError(f"ledger entry {missing[0]} is indexed as archived, but no segment holds it")
    matches = [LedgerEntry.model_construct(**found[seq]) for seq in seqs]
    # The searchable copy chose these entries; each must match the filter on its own, as read from
    # its segment, or the copy was changed after the rollover.
    if stray := next((entry for entry in matches if not _matches(entry, where)), None):
        raise IntegrityError(
            f"ledger_archive's searchable copy of entry {stray.seq} does not match its segment; "
            "custody ledger verify names what differs"
        )
    return matches


def _matches(entry: LedgerEntry, where: LedgerFilter) -> bool:
    wanted = {"asset_key": where.asset, "version": where.version, "actor": where.actor, "run_id": where.run_id}
    if any(value is not None and getattr(entry, name) != value for name, value in wanted.items()):
        return False
    if where.action is not None and entry.action != where.action and not entry.action.startswith(f"{where.action}."):
        return False
    return (where.since is None or entry.ts >= where.since) and (where.until is None or entry.ts < where.until)


@dataclass(frozen=True)
class Verification:
    entries: int
    first_bad_seq: int | None = None
    reason: str | None = None
    checkpoints: int = 0
    problems: tuple[str, ...] = ()
    checkpoints_verified: bool = False

    @property
    def ok(self) -> bool:
        return self.first_bad_seq is None and not self.problems


def verify(session: Session, checkpoints: Checkpoints | None = None, chunk: int = 10_000) -> Verification:
    """Recompute the chain from the first entry and hold it against the checkpoints kept outside the
    database; name the first entry that does not fit. Without a key, the checkpoints are held to
    what they say but cannot be told from forgeries: `checkpoints_verified` is then false."""
    # Read in the reverse of the order of writing (entries, a file line, the head): whatever the head
    # names is then in the file, and whatever the file names is in the table.
    written = checkpoints.read(head(session)) if checkpoints else None
    horizon = written.horizon if written else None
    start = horizon.seq if horizon else 0
    pinned = {c.seq: c for c in written.checkpoints if c.seq > start and not c.aged_off} if written else {}
    problems = (written.problems if written else ()) + _horizon_problems(session, horizon)
    verified = bool(written and written.signed)
    expected_seq, prev_hash, count, matched = start + 1, horizon.hash if horizon else GENESIS, 0, 0

    def bad(seq: int, reason: str) -> Verification:
        return Verification(count, seq, reason, matched, problems, verified)

    for entry in _scan(session, chunk):
        if isinstance(entry, IndexDisagreement):
            return bad(entry.seq, str(entry))
        if isinstance(entry, IntegrityError):
            return bad(expected_seq, str(entry))
        if entry.seq <= start:
            continue  # aged off, its deletion not finished yet
        count += 1
        if entry.seq != expected_seq:
            missing = "missing" if entry.seq > expected_seq else "out of order"
            return bad(expected_seq, f"entry {expected_seq} is {missing} (found {entry.seq})")
        if entry.prev_hash != prev_hash:
            return bad(entry.seq, "does not link to the entry before it")
        if entry_hash(prev_hash, entry) != entry.hash:
            return bad(entry.seq, "content does not match its hash")
        checkpoint = pinned.get(entry.seq)
        if checkpoint is not None:
            if checkpoint.hash != entry.hash:
                return bad(
                    entry.seq,
                    f"its hash differs from the checkpoint of {checkpoint.ts}: the chain up to here was rewritten",
                )
            matched += 1
        expected_seq, prev_hash = entry.seq + 1, entry.hash
    beyond = [seq for seq in pinned if seq >= expected_seq]
    if beyond:
        return bad(expected_seq, f"entries from {expected_seq} on are missing: a checkpoint names entry {max(beyond)}")
    if written and count and not written.end.lines and not problems:
        problems += (
            (
                f"{written.path} {'is empty' if written.exists else 'is missing'}, but the catalog "
                f"holds {count} entries: no checkpoint pins them"
            ),
        )
    return Verification(count, checkpoints=matched, problems=problems, checkpoints_verified=verified)


class IndexDisagreement(IntegrityError):
    """The searchable copy of a rolled-over entry differs from the entry its segment holds."""

    def __init__(self, seq: int, reason: str) -> None:
        super().__init__(reason)
        self.seq = seq


def _indexed(session: Session, segment: LedgerSegmentRow) -> dict[int, dict[str, Any]]:
    """The searchable copies of a segment's entries, by seq."""
    rows = session.exec(
        select(ArchivedEntry).where(
            col(ArchivedEntry.seq) >= segment.first_seq, col(ArchivedEntry.seq) <= segment.last_seq
        )
    )
    return {row.seq: row.model_dump() for row in rows}


def _index_disagreement(entry: Mapping[str, Any], indexed: Mapping[str, Any] | None) -> IndexDisagreement | None:
    """Why the searchable copy of `entry` cannot be trusted, or None when it is the entry's own."""
    seq = entry["seq"]
    if indexed is None:
        return IndexDisagreement(seq, f"ledger_archive has no searchable copy of entry {seq}")
    for name, value in indexed.items():
        if entry.get(name) != value:
            return IndexDisagreement(
                seq,
                f"ledger_archive says {name} {value!r} for entry {seq}, its segment says {entry.get(name)!r}",
            )
    return None


def _horizon_problems(session: Session, horizon) -> tuple[str, ...]:
    """The catalog and the checkpoint file must agree on where the ledger begins."""
    recorded = session.exec(select(LedgerHorizon).order_by(col(LedgerHorizon.seq).desc()).limit(1)).first()
    if recorded is None or (horizon is not None and horizon.seq >= recorded.seq):
        return ()
    return (f"the catalog says entries up to {recorded.seq} were aged off, but no checkpoint records it",)


def segment_file(session: Session, row: LedgerSegmentRow) -> Path:
    """Where a segment the catalog names is: its file in the session's segments folder, never outside it."""
    folder: Path | None = session.info.get(SEGMENTS)
    if folder is None:
        raise IntegrityError(
            f"the ledger's entries {row.first_seq} to {row.last_seq} are in segment {row.path}, "
            "and this catalog was opened without its segments folder"
        )
    if Path(row.path).name != row.path:
        raise IntegrityError(f"the catalog names segment {row.path!r}, not a file name: segments are kept in {folder}")
    return folder / row.path


def _scan(session: Session, chunk: int) -> Iterator[LedgerEntry | IntegrityError]:
    """Every entry in seq order, the segments' then the hot table's; a torn segment, or a searchable
    copy that disagrees with its segment, ends the scan with the error that says where."""
    after = 0
    for row in list(session.exec(select(LedgerSegmentRow).order_by(col(LedgerSegmentRow.first_seq)))):
        indexed = _indexed(session, row)
        try:
            for entry in open_segment(segment_file(session, row)).entries():
                if (disagreement := _index_disagreement(entry, indexed.pop(entry["seq"], None))) is not None:
                    yield disagreement
                    return
                yield LedgerEntry.model_construct(**entry)
        except TornSegment as err:
            yield err
            return
        if indexed:
            yield IndexDisagreement(min(indexed), f"ledger_archive indexes entry {min(indexed)}, its segment has none")
            return
        after = row.last_seq
    while True:
        batch = list(
            session.exec(select(LedgerEntry).where(LedgerEntry.seq > after).order_by(col(LedgerEntry.seq)).limit(chunk))
        )
        yield from batch
        if len(batch) < chunk:
            return
        after = batch[-1].seq
