"""Ledger segment files: immutable, compressed, one per range of sequence numbers.

A segment is a header, then blocks of up to BLOCK_ENTRIES entries (JSON lines, zlib-compressed),
then a table of contents naming each block's seq range, offset, length and sha256, then a footer
that locates the table and holds its sha256. One entry is read by seq from its block alone; a file
cut short, or changed anywhere, fails the footer, table or block check and is reported as torn.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import struct
import tempfile
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, BinaryIO

from governance.errors import IntegrityError

HEADER = b"CUSTODY LEDGER SEGMENT 1\n"
END = b"\nCUSTODY SEGMENT END\n"
FOOTER = struct.Struct(">QQ32s")
BLOCK_ENTRIES = 32  # small enough that reading one entry decompresses little (64: twice the time, 10 % smaller)
INFLATE_STEP = 4096  # bytes decompressed at a time when only a block's first lines are wanted
SUFFIX = ".segment"
PARTIAL = ".writing-"  # the name a segment has until it is whole and on disk


class TornSegment(IntegrityError):
    """A segment file that is incomplete or was changed after it was written."""


@dataclass(frozen=True)
class Block:
    first_seq: int
    last_seq: int
    offset: int
    length: int
    sha256: str


@dataclass(frozen=True)
class Segment:
    """An open segment: its file and its table of contents."""

    path: Path
    first_seq: int
    last_seq: int
    last_hash: str
    blocks: tuple[Block, ...]

    @cached_property
    def _firsts(self) -> list[int]:
        return [block.first_seq for block in self.blocks]

    def entry(self, seq: int) -> dict[str, Any]:
        """One entry, decompressing only the block that holds it."""
        return self.entries_at([seq])[seq]

    def entries_at(self, seqs: Iterable[int]) -> dict[int, dict[str, Any]]:
        """The entries with these seqs, each block that holds some of them decompressed once, and
        only as far as the last of them."""
        wanted: dict[int, set[int]] = {}
        for seq in seqs:
            if not self.first_seq <= seq <= self.last_seq:
                raise KeyError(seq)
            wanted.setdefault(bisect.bisect_right(self._firsts, seq) - 1, set()).add(seq)
        found = {}
        with open(self.path, "rb") as handle:
            for index, in_block in sorted(wanted.items()):
                block = self.blocks[index]
                lines = self._lines(handle, block, upto=max(in_block) - block.first_seq)
                # A block holds consecutive seqs, one per line: only the lines asked for are parsed.
                for seq in in_block:
                    row = (
                        self._parsed(block, lines[seq - block.first_seq]) if seq - block.first_seq < len(lines) else {}
                    )
                    if row.get("seq") != seq:
                        raise TornSegment(f"{self.path}: block {block.first_seq}-{block.last_seq} lacks entry {seq}")
                    found[seq] = row
        return found

    def entries(self) -> Iterator[dict[str, Any]]:
        for block in self.blocks:
            yield from self.read_block(block)

    def read_block(self, block: Block) -> list[dict[str, Any]]:
        with open(self.path, "rb") as handle:
            lines = self._lines(handle, block)
        return [self._parsed(block, line) for line in lines]

    def _parsed(self, block: Block, line: bytes) -> dict[str, Any]:
        try:
            return json.loads(line)
        except ValueError as err:
            raise TornSegment(f"{self.path}: block {block.first_seq}-{block.last_seq} cannot be read: {err}") from err

    def _lines(self, handle: BinaryIO, block: Block, upto: int | None = None) -> list[bytes]:
        """The block's lines; with `upto`, at least its lines 0 to `upto`, decompressing no further
        than needed (half the block, on average, for one entry)."""
        handle.seek(block.offset)
        data = handle.read(block.length)
        if len(data) != block.length or hashlib.sha256(data).hexdigest() != block.sha256:
            raise TornSegment(f"{self.path}: block {block.first_seq}-{block.last_seq} does not match its checksum")
        try:
            if upto is None:
                return zlib.decompress(data).splitlines()
            inflater = zlib.decompressobj()
            chunks = [inflater.decompress(data, INFLATE_STEP)]
            newlines = chunks[0].count(b"\n")
            while newlines <= upto and not inflater.eof:
                chunk = (
                    inflater.decompress(inflater.unconsumed_tail, INFLATE_STEP)
                    if inflater.unconsumed_tail
                    else inflater.flush()
                )
                if not chunk:
                    break
                chunks.append(chunk)
                newlines += chunk.count(b"\n")
            return b"".join(chunks).splitlines()
        except zlib.error as err:
            raise TornSegment(f"{self.path}: block {block.first_seq}-{block.last_seq} cannot be read: {err}") from err


def segment_name(first_seq: int, last_seq: int) -> str:
    return f"{first_seq:012d}-{last_seq:012d}{SUFFIX}"


def write_segment(folder: Path, rows: Iterable[Mapping[str, Any]]) -> Segment:
    """Write the rows (whole ledger entries, in seq order, without gaps) as one segment, made
    visible by a rename once it is complete and on disk."""
    folder.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=PARTIAL, suffix=SUFFIX)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(HEADER)
            blocks, last = _write_blocks(out, rows)
            table = json.dumps(
                {
                    "first_seq": blocks[0].first_seq,
                    "last_seq": blocks[-1].last_seq,
                    "last_hash": last,
                    "blocks": [block.__dict__ for block in blocks],
                },
                separators=(",", ":"),
            ).encode()
            offset = out.tell()
            out.write(table)
            out.write(FOOTER.pack(offset, len(table), hashlib.sha256(table).digest()) + END)
            out.flush()
            os.fsync(out.fileno())
        final = folder / segment_name(blocks[0].first_seq, blocks[-1].last_seq)
        os.replace(temporary, final)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    _sync_folder(folder)
    return Segment(final, blocks[0].first_seq, blocks[-1].last_seq, last, tuple(blocks))


def _write_blocks(out, rows: Iterable[Mapping[str, Any]]) -> tuple[list[Block], str]:
    blocks: list[Block] = []
    pending: list[Mapping[str, Any]] = []
    expected, last_hash = None, ""

    def flush() -> None:
        data = zlib.compress(
            b"".join(json.dumps(dict(row), separators=(",", ":")).encode() + b"\n" for row in pending), 6
        )
        blocks.append(
            Block(pending[0]["seq"], pending[-1]["seq"], out.tell(), len(data), hashlib.sha256(data).hexdigest())
        )
        out.write(data)
        pending.clear()

    for row in rows:
        if expected is not None and row["seq"] != expected:
            raise IntegrityError(f"segment rows are not consecutive: {row['seq']} follows {expected - 1}")
        pending.append(row)
        expected, last_hash = row["seq"] + 1, row["hash"]
        if len(pending) == BLOCK_ENTRIES:
            flush()
    if pending:
        flush()
    if not blocks:
        raise IntegrityError("a segment needs at least one entry")
    return blocks, last_hash


def open_segment(path: Path) -> Segment:
    """Read a segment's footer and table of contents; a file cut short or changed is torn."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            tail = FOOTER.size + len(END)
            if size < len(HEADER) + tail:
                raise TornSegment(f"{path}: too short to be a segment ({size} bytes)")
            handle.seek(0)
            header = handle.read(len(HEADER))
            handle.seek(size - tail)
            footer = handle.read(tail)
            if header != HEADER or not footer.endswith(END):
                raise TornSegment(f"{path}: no segment header or end mark: the file was cut short or is not a segment")
            offset, length, digest = FOOTER.unpack(footer[: FOOTER.size])
            handle.seek(offset)
            table = handle.read(length)
    except OSError as err:
        raise TornSegment(f"{path}: cannot be read: {err}") from err
    if len(table) != length or hashlib.sha256(table).digest() != digest:
        raise TornSegment(f"{path}: its table of contents does not match its checksum")
    body = json.loads(table)
    blocks = tuple(Block(**block) for block in body["blocks"])
    return Segment(Path(path), body["first_seq"], body["last_seq"], body["last_hash"], blocks)


def opened(path: Path) -> Segment:
    """`open_segment`, remembered: a segment never changes once written, so its table of contents is
    read once per process, and again only if the file is replaced or altered (its size or time)."""
    try:
        stat = os.stat(path)
    except OSError as err:
        raise TornSegment(f"{path}: cannot be read: {err}") from err
    return _opened(str(path), stat.st_size, stat.st_mtime_ns, stat.st_ino)


@lru_cache(maxsize=256)
def _opened(path: str, _size: int, _mtime_ns: int, _inode: int) -> Segment:
    return open_segment(Path(path))


def _sync_folder(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
