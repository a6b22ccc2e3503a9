"""DropZone batch checks: what the pass that hashes a batch learns of its files."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from governance.batches import TextScan, drop_batch, mark_ready, open_batch, scan_batch
from governance.errors import BatchError
from governance.zones import AssetKey, Lake
from tests.helpers import alias_bomb

PEOPLE = AssetKey("t", "people")


def scanned(*blocks: bytes) -> TextScan:
    text = TextScan()
    for block in blocks:
        text.feed(block)
    return text


@pytest.mark.parametrize(
    ("blocks", "valid"),
    [
        ((b"plain ascii", b"more"), True),
        (("caf\u00e9".encode(),), True),
        (("\u20ac".encode()[:1], "\u20ac".encode()[1:], b"ascii after"), True),
        (("\u20ac".encode()[:2], b"x"), False),
        ((b"ok", "\u20ac".encode()[:2]), False),
        ((b"b\xf6b",), False),
        (("\ufffd is a legitimate character".encode(),), True),
    ],
)
def test_utf8_is_validated_across_block_boundaries(blocks, valid):
    assert scanned(*blocks).valid_utf8 is valid


@pytest.mark.parametrize(
    ("blocks", "expected"),
    [
        ((b"a\nb\n",), 2),
        ((b"a\nb",), 2),
        ((b"a\r\nb\r\n",), 2),
        ((b"a\r", b"\nb\r\n"), 2),
        ((b"a\rb\rc",), 3),
        ((b"a\r\n\r\nb",), 3),
        ((b"\n\n",), 2),
        ((b"",), 0),
    ],
)
def test_lines_are_counted_as_spark_splits_them_across_block_boundaries(blocks, expected):
    assert scanned(*blocks).lines == expected


def test_a_file_that_changes_after_the_batch_is_opened_is_refused(lake):
    key = AssetKey("t", "people")
    folder = drop_batch(lake, key, "b1", {"p.csv": b"id,name,score\n1,ann,1.5\n"})
    batch = open_batch(lake, key, "b1", "csv")
    with open(folder / "p.csv", "ab") as handle:
        handle.write(b"2,bob,2.5\n")
    with pytest.raises(BatchError, match=r"p.csv: changed while being ingested \(24 bytes, then 34\)"):
        scan_batch(batch)


def batch_with_meta(lake: Lake, meta: str | bytes) -> Path:
    """A ready batch of one CSV file whose `_batch.yaml` holds `meta`; the file's path."""
    folder = drop_batch(lake, PEOPLE, "b1", {"p.csv": b"id,name,score\n1,ann,1.5\n"})
    path = folder / "_batch.yaml"
    path.write_bytes(meta.encode() if isinstance(meta, str) else meta)
    mark_ready(folder)
    return path


def test_a_batch_yaml_with_aliases_is_refused_at_the_first_alias_without_expanding_them(lake):
    path = batch_with_meta(lake, "note: x\n" + alias_bomb("label"))
    started = time.perf_counter()
    with pytest.raises(BatchError) as raised:
        open_batch(lake, PEOPLE, "b1", "csv")
    assert time.perf_counter() - started < 0.5
    assert str(raised.value) == f"{path}: line 4: YAML aliases (*name) are not accepted: write the value out"


def test_a_batch_yaml_over_64_kb_is_refused_before_it_is_parsed(lake):
    path = batch_with_meta(lake, "note: [" + "x" * 70_000)
    with pytest.raises(BatchError) as raised:
        open_batch(lake, PEOPLE, "b1", "csv")
    assert str(raised.value) == f"{path}: 70,007 bytes, more than the 65,536 bytes (64 KB) a _batch.yaml may hold"


NOT_A_USER = "not a directory user name: letters, digits, '.', '_' or '-', at most 64"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        pytest.param("requested_by", "b" * 65, f"requested_by: {NOT_A_USER}", id="requested_by-65"),
        pytest.param("requested_by", "bob smith", f"requested_by: {NOT_A_USER}", id="requested_by-space"),
        pytest.param("label", "l" * 129, "label: String should have at most 128 characters", id="label-129"),
        pytest.param("note", "n" * 4097, "note: String should have at most 4096 characters", id="note-4097"),
    ],
)
def test_each_batch_yaml_field_is_bounded_and_a_longer_value_refused_naming_it(lake, field, value, message):
    path = batch_with_meta(lake, f"{field}: {value}\n")
    with pytest.raises(BatchError) as raised:
        open_batch(lake, PEOPLE, "b1", "csv")
    assert str(raised.value) == f"{path}: {message}"


def test_batch_yaml_fields_at_their_limits_are_accepted(lake):
    batch_with_meta(lake, f"requested_by: {'b' * 64}\nlabel: {'l' * 128}\nnote: {'n' * 4096}\n")
    meta = open_batch(lake, PEOPLE, "b1", "csv").meta
    assert (len(meta.requested_by), len(meta.label), len(meta.note)) == (64, 128, 4096)


def test_a_batch_yaml_that_is_not_a_regular_file_is_refused_without_waiting_on_it(lake):
    folder = drop_batch(lake, PEOPLE, "b1", {"p.csv": b"id,name,score\n1,ann,1.5\n"})
    os.mkfifo(folder / "_batch.yaml")
    with pytest.raises(BatchError) as raised:
        open_batch(lake, PEOPLE, "b1", "csv")
    assert str(raised.value) == f"{folder / '_batch.yaml'}: not a regular file"
