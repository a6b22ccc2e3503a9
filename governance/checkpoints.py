"""Ledger checkpoints kept outside the database: an append-only JSON-lines file of `(seq, hash)`.

Someone who can rewrite the catalog can recompute the whole hash chain after an edit, or cut its
tail, and the chain alone would still verify. The checkpoints, written elsewhere as the ledger
grows, pin what the chain was. With CUSTODY_LEDGER_KEY set, each line carries an HMAC-SHA256, so
new checkpoints cannot be forged for a rewritten chain without the key.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from governance.config import env_count

KEY_VARIABLE = "CUSTODY_LEDGER_KEY"
EVERY_VARIABLE = "CUSTODY_LEDGER_CHECKPOINT_EVERY"
DEFAULT_EVERY = 1000
TAIL_BYTES = 4096


@dataclass(frozen=True)
class Checkpoint:
    """A seq and its hash at a moment; `aged_off` marks the last entry deleted by an age-off."""

    seq: int
    hash: str
    ts: str
    aged_off: bool = False


@dataclass(frozen=True)
class CheckpointFile:
    """What the file holds: the checkpoints that can be trusted, and what is wrong with the others."""

    checkpoints: tuple[Checkpoint, ...]
    problems: tuple[str, ...]

    @property
    def horizon(self) -> Checkpoint | None:
        """The latest age-off: the ledger is verified from the entry after it."""
        return max((c for c in self.checkpoints if c.aged_off), key=lambda c: c.seq, default=None)


@dataclass(frozen=True)
class Checkpoints:
    """The checkpoint file of one catalog, its signing key (secret, never shown) and how often to write."""

    path: Path
    key: bytes | None = field(default=None, repr=False)
    every: int = DEFAULT_EVERY

    @classmethod
    def under(cls, home: Path, environ: Mapping[str, str]) -> Checkpoints:
        return cls(Path(home) / "ledger" / "checkpoints.jsonl", _key(environ), _every(environ))

    def write(self, seq: int, entry_hash: str, *, aged_off: bool = False) -> Checkpoint:
        """Append one checkpoint unless the file already holds this seq or a later one (an age-off
        record is always appended: it names an entry older than the last checkpoint)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        ts = datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
        body: dict[str, object] = {"seq": seq, "hash": entry_hash, "ts": ts}
        if aged_off:
            body["aged_off"] = True
        if self.key:
            body["mac"] = self._mac(seq, entry_hash, ts, aged_off)
        # One write of one line to a file opened for appending: lines from processes that checkpoint
        # at once never interleave. The lock orders them, so the file's seqs only grow.
        with open(self.path, "a+b") as out:
            fcntl.flock(out, fcntl.LOCK_EX)
            last = _last_seq(out)
            if aged_off or last is None or seq > last:
                out.write((json.dumps(body, sort_keys=True, separators=(",", ":")) + "\n").encode())
                out.flush()
                os.fsync(out.fileno())
        return Checkpoint(seq, entry_hash, ts, aged_off)

    def read(self) -> CheckpointFile:
        if not self.path.exists():
            return CheckpointFile((), ())
        found, problems = [], []
        with open(self.path, encoding="utf-8", errors="replace") as lines:
            for number, line in enumerate(lines, start=1):
                checkpoint, problem = self._parse(line)
                if problem:
                    problems.append(f"{self.path}:{number}: {problem}")
                elif checkpoint:
                    found.append(checkpoint)
        return CheckpointFile(tuple(found), tuple(problems))

    def _parse(self, line: str) -> tuple[Checkpoint | None, str | None]:
        if not line.strip():
            return None, None
        if not line.endswith("\n"):
            return None, "a torn last line (the write was interrupted)"
        try:
            body = json.loads(line)
            checkpoint = Checkpoint(int(body["seq"]), str(body["hash"]), str(body["ts"]), bool(body.get("aged_off")))
        except (ValueError, KeyError, TypeError):
            return None, "not a checkpoint"
        if self.key:
            mac = body.get("mac")
            if not mac:
                return None, "not signed, though CUSTODY_LEDGER_KEY is set"
            if not hmac.compare_digest(str(mac), self._mac(checkpoint.seq, checkpoint.hash, checkpoint.ts, checkpoint.aged_off)):
                return None, "its signature does not match: edited, or signed with another key"
        return checkpoint, None

    def _mac(self, seq: int, entry_hash: str, ts: str, aged_off: bool) -> str:
        message = f"{seq}\n{entry_hash}\n{ts}" + ("\naged off" if aged_off else "")
        return hmac.new(self.key or b"", message.encode(), hashlib.sha256).hexdigest()


def _last_seq(handle) -> int | None:
    """The seq of the file's last whole line, read from its tail."""
    size = handle.seek(0, os.SEEK_END)
    handle.seek(max(0, size - TAIL_BYTES))
    for line in reversed(handle.read().splitlines()):
        try:
            body = json.loads(line)
            if not body.get("aged_off"):
                return int(body["seq"])
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # the tail may start mid-line; the line before is whole
    return None


def _key(environ: Mapping[str, str]) -> bytes | None:
    value = environ.get(KEY_VARIABLE)
    return value.encode() if value else None


def _every(environ: Mapping[str, str]) -> int:
    every = env_count(environ, EVERY_VARIABLE, "entries")
    return DEFAULT_EVERY if every is None else every
