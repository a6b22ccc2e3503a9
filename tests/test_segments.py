"""Ledger segment files: compressed blocks with a table of contents, one entry read by seq from its
block alone, and a file cut short or changed anywhere reported as torn."""

from __future__ import annotations

import json
import zlib

import pytest

from governance.errors import IntegrityError
from governance.segments import BLOCK_ENTRIES, Segment, TornSegment, open_segment, write_segment

COUNT = BLOCK_ENTRIES * 3 + 17


def rows(first: int = 1, count: int = COUNT) -> list[dict]:
    return [
        {
            "seq": seq,
            "ts": f"2026-01-01T00:00:{seq % 60:02d}.000000Z",
            "actor": "bob",
            "action": "read",
            "asset_key": "t/people",
            "version": 1,
            "run_id": None,
            "details": json.dumps({"i": seq}),
            "prev_hash": f"{seq - 1:064x}",
            "hash": f"{seq:064x}",
            "assurance": "asserted",
        }
        for seq in range(first, first + count)
    ]


@pytest.fixture
def segment(tmp_path) -> Segment:
    return write_segment(tmp_path / "segments", rows(101))


def test_a_segment_is_named_by_its_seq_range_and_holds_every_entry(segment):
    assert segment.path.name == f"{101:012d}-{100 + COUNT:012d}.segment"
    reopened = open_segment(segment.path)
    assert (reopened.first_seq, reopened.last_seq, reopened.last_hash) == (101, 100 + COUNT, f"{100 + COUNT:064x}")
    assert list(reopened.entries()) == rows(101)
    assert len(reopened.blocks) == 4 and not list(segment.path.parent.glob(".writing-*"))


def test_one_entry_is_read_from_its_block_alone_decompressed_no_further_than_it(segment, monkeypatch):
    reopened = open_segment(segment.path)
    inflaters = []
    real = zlib.decompressobj
    monkeypatch.setattr(zlib, "decompressobj", lambda: inflaters.append(real()) or inflaters[-1])
    assert reopened.entry(101 + BLOCK_ENTRIES * 2 + 5) == rows(101)[BLOCK_ENTRIES * 2 + 5]
    assert len(inflaters) == 1 and inflaters[0].unconsumed_tail  # the block's end stayed compressed
    with pytest.raises(KeyError):
        reopened.entry(100)


def test_every_entry_reads_back_alone_or_with_others_of_its_block(segment):
    reopened = open_segment(segment.path)
    expected = {row["seq"]: row for row in rows(101)}
    assert all(reopened.entry(seq) == row for seq, row in expected.items())
    last_lines = [block.last_seq for block in reopened.blocks]
    assert reopened.entries_at([101, *last_lines, 102]) == {seq: expected[seq] for seq in [101, 102, *last_lines]}


def test_a_segment_written_with_other_block_sizes_reads_the_same(tmp_path, monkeypatch):
    monkeypatch.setattr("governance.segments.BLOCK_ENTRIES", 64)
    older = open_segment(write_segment(tmp_path / "older", rows(1)).path)
    assert {b.last_seq - b.first_seq + 1 for b in older.blocks} >= {64}
    assert older.entries_at(range(1, COUNT + 1)) == {row["seq"]: row for row in rows(1)}


@pytest.mark.parametrize("cut", [1, 30, 200, 5000])
def test_a_segment_cut_short_is_torn(segment, cut):
    data = segment.path.read_bytes()
    segment.path.write_bytes(data[: len(data) - cut])
    with pytest.raises(TornSegment, match=segment.path.name):
        open_segment(segment.path)


def test_a_changed_block_is_torn_when_read(segment):
    data = bytearray(segment.path.read_bytes())
    block = segment.blocks[1]
    data[block.offset + block.length // 2] ^= 0xFF
    segment.path.write_bytes(bytes(data))
    reopened = open_segment(segment.path)
    assert reopened.entry(101) == rows(101)[0]
    with pytest.raises(TornSegment, match="does not match its checksum"):
        reopened.entry(block.first_seq)


def test_a_changed_table_of_contents_is_torn(segment):
    data = segment.path.read_bytes()
    table_at = segment.path.read_bytes().rindex(b'"blocks"')
    segment.path.write_bytes(data[:table_at] + b"X" + data[table_at + 1 :])
    with pytest.raises(TornSegment, match="table of contents"):
        open_segment(segment.path)


def test_rows_with_a_gap_are_refused_and_leave_nothing(tmp_path):
    with pytest.raises(IntegrityError, match="not consecutive"):
        write_segment(tmp_path, rows(1, 5) + rows(7, 3))
    assert list(tmp_path.iterdir()) == []


def test_many_entries_are_read_with_each_block_decompressed_once(segment, monkeypatch):
    reopened = open_segment(segment.path)
    inflaters = []
    real = zlib.decompressobj
    monkeypatch.setattr(zlib, "decompressobj", lambda: inflaters.append(real()) or inflaters[-1])
    wanted = range(101 + BLOCK_ENTRIES // 2, 101 + BLOCK_ENTRIES + BLOCK_ENTRIES // 2)
    found = reopened.entries_at(wanted)
    assert [found[seq]["seq"] for seq in wanted] == list(wanted) and len(inflaters) == 2


def test_an_open_segment_is_remembered_until_its_file_changes(segment, tmp_path):
    from governance.segments import opened

    assert opened(segment.path) is opened(segment.path)
    other = write_segment(tmp_path / "other", rows(101, 10))
    other.path.replace(segment.path)
    assert opened(segment.path).last_seq == 110
