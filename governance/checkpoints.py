"""Ledger checkpoints kept outside the database: an append-only JSON-lines file of `(seq, hash)`,
itself a hash chain, anchored in the catalog.

Someone who can rewrite the catalog can recompute the whole hash chain after an edit, or cut its
tail, and the chain alone would still verify. The checkpoints, written elsewhere as the ledger
grows, pin what the chain was. Each line carries its number and `prev`, the sha256 of the line
before it, so no line can be removed, inserted or changed without breaking the lines after it. The
first line, the genesis, names the ledger the file belongs to. The catalog keeps the file's head:
how many lines it holds and the sha256 of the last, so a file deleted, emptied or cut at its tail
is named. With CUSTODY_LEDGER_KEY set, every line and the head carry an HMAC-SHA256 over all their
fields, under different messages, so neither can be forged, nor one taken for the other, without
the key.

A file begun by an earlier release (lines of `seq`, `hash`, `ts` and a signature of their own)
keeps its lines; the genesis written after them links to the sha256 of all of them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from governance.config import env_amount, env_count
from governance.errors import IntegrityError
from governance.locks import file_lock

KEY_VARIABLE = "CUSTODY_LEDGER_KEY"
EVERY_VARIABLE = "CUSTODY_LEDGER_CHECKPOINT_EVERY"
SECONDS_VARIABLE = "CUSTODY_LEDGER_CHECKPOINT_SECONDS"
DEFAULT_EVERY = 1000
DEFAULT_SECONDS = 5.0
TAIL_BYTES = 4096
FILE_NAME = "checkpoints.jsonl"
GENESIS, CHECKPOINT, AGED_OFF = "genesis", "checkpoint", "aged_off"
NO_LINES = hashlib.sha256(b"").hexdigest()  # what the first line of an empty file links to
LINE_MESSAGE = "custody checkpoint line\n"
HEAD_MESSAGE = "custody checkpoint head\n"


@dataclass(frozen=True)
class Checkpoint:
    """A seq and its hash at a moment; `aged_off` marks the last entry deleted by an age-off."""

    seq: int
    hash: str
    ts: str
    aged_off: bool = False


@dataclass(frozen=True)
class Head:
    """The catalog's record of a checkpoint file: the ledger it belongs to, how many lines it holds,
    the sha256 of its last line, its size in bytes (None in a record an earlier release kept), and
    the signature over them."""

    ledger: str
    lines: int = 0
    last_line: str = ""
    mac: str | None = None
    size: int | None = None


@dataclass(frozen=True)
class End:
    """Where a file ends: its whole lines, the digest the next line links to, the newest seq a
    checkpoint (not an aged-off record) pins, whether it has its genesis line, and its size."""

    lines: int
    link: str
    last_seq: int | None
    anchored: bool
    size: int


@dataclass(frozen=True)
class Genesis:
    """The line that names the ledger, the entry it was written after, and where it is in the file."""

    ledger: str
    seq: int
    line: int


@dataclass(frozen=True)
class CheckpointFile:
    """What the file holds: the checkpoints that can be trusted, and what is wrong with the others,
    with the file as a whole, and with its place in the ledger's history."""

    path: Path
    exists: bool
    end: End
    genesis: Genesis | None
    checkpoints: tuple[Checkpoint, ...]
    line_problems: tuple[str, ...]
    mismatches: tuple[str, ...]
    history: tuple[str, ...]
    signed: bool
    # Its last line is torn (the last of `line_problems`): a write that never finished, cut off
    # before the next line is written.
    torn: bool = False

    @property
    def problems(self) -> tuple[str, ...]:
        return self.line_problems + self.mismatches + self.history

    @property
    def horizon(self) -> Checkpoint | None:
        """The latest age-off: the ledger is verified from the entry after it."""
        return max((c for c in self.checkpoints if c.aged_off), key=lambda c: c.seq, default=None)


@dataclass(frozen=True)
class Checkpoints:
    """The checkpoint file of one catalog, its signing key (secret, never shown) and how often to
    write: when appends reach a multiple of `every` entries, or `seconds` after the last checkpoint."""

    path: Path
    key: bytes | None = field(default=None, repr=False)
    every: int = DEFAULT_EVERY
    seconds: float = DEFAULT_SECONDS

    @classmethod
    def under(cls, folder: Path, environ: Mapping[str, str]) -> Checkpoints:
        """The checkpoint file in `folder` (CUSTODY_LEDGER_CHECKPOINTS, else $CUSTODY_HOME/ledger)."""
        seconds = env_amount(environ, SECONDS_VARIABLE, "seconds")
        return cls(
            Path(folder) / FILE_NAME, _key(environ), _every(environ), DEFAULT_SECONDS if seconds is None else seconds
        )

    def due(self, first: int, last: int) -> bool:
        """Whether entries `first`..`last`, just committed, call for a checkpoint: they reach a
        multiple of `every`, or the newest checkpoint is `seconds` old, or there is none."""
        if last // self.every > (first - 1) // self.every:
            return True
        try:
            return time.time() - self.path.stat().st_mtime >= self.seconds
        except FileNotFoundError:
            return True

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Writers of this file, in any process, one at a time. The lock is a file of its own, so
        that taking it never creates the checkpoint file."""
        with file_lock(self.path.with_name(self.path.name + ".lock")):
            yield

    def continuing(self, head: Head | None) -> End:
        """Where the next line goes, once the file is known to be the one `head` describes (or
        ahead of it, by lines a writer added before it died). Call it holding the lock."""
        mismatch = self.head_problem(head)
        tail = None if mismatch else self._tail()
        if tail is not None and head is not None and (tail.lines, tail.link, tail.size) == _recorded_end(head, tail):
            return tail
        whole = self.read(head)
        damaged = whole.line_problems[:-1] if whole.torn else whole.line_problems
        mismatch = mismatch or next(iter(whole.mismatches + damaged), None)
        if mismatch:
            raise IntegrityError(
                f"cannot checkpoint the ledger: {mismatch}. Custody does not write over a checkpoint "
                "file the catalog does not recognise; `custody ledger verify` says what is wrong"
            )
        if whole.exists and whole.end.size < self.path.stat().st_size:
            os.truncate(self.path, whole.end.size)  # a torn last line: its write never finished
        return whole.end

    def extend(
        self,
        end: End,
        seq: int,
        entry_hash: str,
        *,
        aged_off: bool = False,
        genesis: tuple[str, int, str] | None = None,
    ) -> End:
        """Append the genesis line `(ledger, seq, hash)` when given, then a checkpoint, unless the
        file already pins this seq or a later one (an aged-off record is always appended: it names
        an entry older than the last checkpoint). One write, flushed to disk; the new end."""
        ts = datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
        lines, link, last_seq = [], end.link, end.last_seq
        if genesis is not None:
            ledger, since, since_hash = genesis
            lines.append(
                self._line(
                    {
                        "n": end.lines + 1,
                        "prev": link,
                        "kind": GENESIS,
                        "ledger": ledger,
                        "seq": since,
                        "hash": since_hash,
                        "ts": ts,
                    }
                )
            )
            link, last_seq = hashlib.sha256(lines[-1]).hexdigest(), since
        if aged_off or last_seq is None or seq > last_seq:
            lines.append(
                self._line(
                    {
                        "n": end.lines + len(lines) + 1,
                        "prev": link,
                        "kind": AGED_OFF if aged_off else CHECKPOINT,
                        "seq": seq,
                        "hash": entry_hash,
                        "ts": ts,
                    }
                )
            )
            link, last_seq = hashlib.sha256(lines[-1]).hexdigest(), last_seq if aged_off else seq
        if not lines:
            return end
        written = b"".join(lines)
        with open(self.path, "ab") as out:
            out.write(written)
            out.flush()
            os.fsync(out.fileno())
        return End(end.lines + len(lines), link, last_seq, True, end.size + len(written))

    def head(self, ledger: str, end: End) -> Head:
        """The head to record for a file that ends at `end`, signed when there is a key."""
        return Head(ledger, end.lines, end.link, self.head_mac(ledger, end.lines, end.link, end.size), end.size)

    def head_mac(self, ledger: str, lines: int, last_line: str, size: int | None = None) -> str | None:
        if not self.key:
            return None
        sized = "" if size is None else f"\n{size}"
        return _mac(self.key, f"{HEAD_MESSAGE}{ledger}\n{lines}\n{last_line}{sized}")

    def read(self, head: Head | None = None) -> CheckpointFile:
        """Every line, checked, and the file held against the catalog's `head`."""
        reading = _Reading(self, head)
        try:
            with open(self.path, "rb") as lines:
                for number, raw in enumerate(lines, start=1):
                    reading.add(number, raw)
        except FileNotFoundError:
            return reading.result(exists=False)
        return reading.result(exists=True)

    def _line(self, fields: dict[str, Any]) -> bytes:
        if self.key:
            fields = {**fields, "mac": _mac(self.key, LINE_MESSAGE + _canonical(fields))}
        return (_canonical(fields) + "\n").encode()

    def _tail(self) -> End | None:
        """The end of the file from its last few lines, when they are whole and of this format."""
        try:
            with open(self.path, "rb") as handle:
                size = handle.seek(0, os.SEEK_END)
                handle.seek(max(0, size - TAIL_BYTES))
                chunk = handle.read()
        except FileNotFoundError:
            return None
        if not chunk.endswith(b"\n"):
            return None
        lines = [line + b"\n" for line in chunk.split(b"\n")[:-1]]
        if size > len(chunk):
            lines = lines[1:]  # the chunk may begin mid-line
        last = _body(lines[-1]) if lines else None
        if last is None or type(last.get("n")) is not int:
            return None
        pinned = (_pinned_seq(_body(line)) for line in reversed(lines))
        return End(
            last["n"],
            hashlib.sha256(lines[-1]).hexdigest(),
            next((s for s in pinned if s is not None), None),
            True,
            size,
        )

    def head_problem(self, head: Head | None) -> str | None:
        if not self.key or head is None:
            return None
        if not head.mac:
            return f"the catalog's record of {self.path} is not signed, though {KEY_VARIABLE} is set"
        if not hmac.compare_digest(head.mac, self.head_mac(head.ledger, head.lines, head.last_line, head.size) or ""):
            return (
                f"the catalog's record of {self.path} does not match its signature: edited, or signed with another key"
            )
        return None


class _Reading:
    """The state of one pass over a checkpoint file."""

    def __init__(self, source: Checkpoints, head: Head | None):
        self.source, self.head = source, head
        self.prefix = hashlib.sha256()  # the lines before the genesis: the earlier format's
        self.link = NO_LINES
        self.lines = self.whole_bytes = 0
        self.torn = False
        self.genesis: Genesis | None = None
        self.last_seq: int | None = None
        self.at_head: str | None = None  # the digest of the line the head names
        self.found: list[Checkpoint] = []
        self.problems: list[str] = []

    def add(self, number: int, raw: bytes) -> None:
        self.lines = number
        if not raw.endswith(b"\n"):
            self.torn = True
            self.problems.append(f"{self.source.path}:{number}: a torn last line (the write was interrupted)")
            return
        self.whole_bytes += len(raw)
        digest = hashlib.sha256(raw).hexdigest()
        body = _body(raw)
        if body is not None and "n" in body:
            self._current(number, body)
            self.link = digest
        else:
            self._earlier(number, body)
            if self.genesis is None:
                self.prefix.update(raw)
                self.link = self.prefix.hexdigest()
            else:
                self.link = digest
        if self.head is not None and number == self.head.lines:
            self.at_head = digest

    def _current(self, number: int, body: dict[str, Any]) -> None:
        if not _well_formed(body):
            self._problem(number, "not a checkpoint")
            return
        seq, kind = body["seq"], body["kind"]
        what = {GENESIS: "the genesis line", AGED_OFF: f"the aged-off record of entry {seq}"}.get(
            kind, f"the checkpoint of entry {seq}"
        )
        problem = self._out_of_place(number, body) or self._signature(body)
        if kind == GENESIS and self.genesis is None:
            self.genesis = Genesis(body["ledger"], seq, number)
        if problem:
            self._problem(number, f"{what}: {problem}")
            return
        if kind != GENESIS or seq > 0:
            self.found.append(Checkpoint(seq, body["hash"], body["ts"], kind == AGED_OFF))
        if kind != AGED_OFF:
            self.last_seq = seq

    def _out_of_place(self, number: int, body: dict[str, Any]) -> str | None:
        if body["n"] != number:
            return f"it says it is line {body['n']}"
        if body["prev"] != self.link:
            return "it does not follow the line before it: a line before it was changed, removed or inserted"
        if body["kind"] == GENESIS and self.genesis is not None:
            return f"a second genesis line (the first is line {self.genesis.line})"
        if body["kind"] != GENESIS and self.genesis is None:
            return "it comes before the genesis line"
        return None

    def _signature(self, body: dict[str, Any]) -> str | None:
        key = self.source.key
        if not key:
            return None
        fields = {name: value for name, value in body.items() if name != "mac"}
        return _signature_problem(body.get("mac"), _mac(key, LINE_MESSAGE + _canonical(fields)))

    def _earlier(self, number: int, body: dict[str, Any] | None) -> None:
        """A line of the earlier format: `seq`, `hash`, `ts`, `aged_off` and a signature over them."""
        checkpoint = _earlier_checkpoint(body)
        if body is None or checkpoint is None:
            self._problem(number, "not a checkpoint")
            return
        what = f"the {'aged-off record' if checkpoint.aged_off else 'checkpoint'} of entry {checkpoint.seq}"
        if self.genesis is not None:
            self._problem(number, f"{what}: a line of the earlier format after the genesis line")
            return
        key = self.source.key
        problem = _signature_problem(body.get("mac"), _earlier_mac(key, checkpoint)) if key else None
        if problem:
            self._problem(number, f"{what}: {problem}")
            return
        self.found.append(checkpoint)
        if not checkpoint.aged_off:
            self.last_seq = checkpoint.seq

    def _problem(self, number: int, problem: str) -> None:
        self.problems.append(f"{self.source.path}:{number}: {problem}")

    def result(self, *, exists: bool) -> CheckpointFile:
        whole = self.lines - 1 if self.torn else self.lines
        return CheckpointFile(
            path=self.source.path,
            exists=exists,
            end=End(whole, self.link, self.last_seq, self.genesis is not None, self.whole_bytes),
            genesis=self.genesis,
            checkpoints=tuple(self.found),
            line_problems=tuple(self.problems),
            mismatches=tuple(self._mismatches(exists, whole)),
            history=tuple(self._history()),
            signed=self.source.key is not None,
            torn=self.torn,
        )

    def _mismatches(self, exists: bool, whole: int) -> list[str]:
        """How the file differs from the catalog's record of it."""
        path, genesis, head = self.source.path, self.genesis, self.head
        found = [problem for problem in [self.source.head_problem(head)] if problem]
        if head is None:
            if genesis is not None:
                found.append(
                    f"the catalog keeps no record of {path}, which belongs to ledger {genesis.ledger}: "
                    "the record was deleted, or the file comes from another catalog"
                )
            return found
        if whole < head.lines:
            if not exists:
                found.append(f"{path} is missing: the catalog recorded {head.lines} checkpoint line(s)")
            elif whole == 0:
                found.append(f"{path} is empty: the catalog recorded {head.lines} checkpoint line(s)")
            else:
                found.append(f"{path} holds {whole} line(s), but the catalog recorded {head.lines}: its tail was cut")
        elif head.lines and self.at_head != head.last_line:
            found.append(f"{path}:{head.lines} is not the line the catalog recorded there: the file was rewritten")
        if genesis is not None and genesis.ledger != head.ledger:
            found.append(f"{path} belongs to ledger {genesis.ledger}, not to this catalog's ledger {head.ledger}")
        elif genesis is None and whole:
            found.append(f"{path} has no genesis line naming ledger {head.ledger}")
        return found

    def _history(self) -> list[str]:
        """A file that begins after the ledger did, with no earlier checkpoint before its genesis, pins
        nothing about the entries before it."""
        genesis = self.genesis
        if genesis is None or genesis.seq == 0 or genesis.line > 1:
            return []
        return [
            (
                f"{self.source.path} begins at entry {genesis.seq}, but the ledger began before it: no checkpoint "
                "pins the entries up to it (the file and the catalog's record of it were replaced, or the ledger "
                "had no checkpoint before)"
            )
        ]


def _recorded_end(head: Head, tail: End) -> tuple[int, str, int]:
    """Where the catalog says the file ends; its size, in a record without one, taken as found."""
    return head.lines, head.last_line, tail.size if head.size is None else head.size


def _well_formed(body: dict[str, Any]) -> bool:
    if (
        type(body.get("n")) is not int
        or type(body.get("seq")) is not int
        or body.get("kind") not in (GENESIS, CHECKPOINT, AGED_OFF)
    ):
        return False
    if not all(isinstance(body.get(name), str) for name in ("prev", "hash", "ts")):
        return False
    return body["kind"] != GENESIS or isinstance(body.get("ledger"), str)


def _pinned_seq(body: dict[str, Any] | None) -> int | None:
    """The seq a line pins as the newest so far, if it is a checkpoint or genesis line."""
    if body is None or type(body.get("seq")) is not int:
        return None
    if body.get("kind", CHECKPOINT) == AGED_OFF or body.get("aged_off"):
        return None
    return body["seq"]


def _body(raw: bytes) -> dict[str, Any] | None:
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _canonical(fields: Mapping[str, Any]) -> str:
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


def _mac(key: bytes, message: str) -> str:
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


def _earlier_checkpoint(body: dict[str, Any] | None) -> Checkpoint | None:
    if body is None:
        return None
    try:
        return Checkpoint(int(body["seq"]), str(body["hash"]), str(body["ts"]), bool(body.get("aged_off")))
    except (ValueError, KeyError, TypeError):
        return None


def _earlier_mac(key: bytes, checkpoint: Checkpoint) -> str:
    message = f"{checkpoint.seq}\n{checkpoint.hash}\n{checkpoint.ts}" + ("\naged off" if checkpoint.aged_off else "")
    return _mac(key, message)


def _signature_problem(mac: object, expected: str) -> str | None:
    if not mac:
        return f"not signed, though {KEY_VARIABLE} is set"
    if not hmac.compare_digest(str(mac), expected):
        return "its signature does not match: edited, or signed with another key"
    return None


def _key(environ: Mapping[str, str]) -> bytes | None:
    value = environ.get(KEY_VARIABLE)
    return value.encode() if value else None


def _every(environ: Mapping[str, str]) -> int:
    every = env_count(environ, EVERY_VARIABLE, "entries")
    return DEFAULT_EVERY if every is None else every
