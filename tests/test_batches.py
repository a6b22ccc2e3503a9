"""DropZone batch checks: what the pass that hashes a batch learns of its files."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from governance.batches import TextScan, drop_batch, open_batch, scan_batch
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
    return path


def test_a_batch_yaml_with_aliases_is_refused_at_the_first_alias_without_expanding_them(lake):
    path = batch_with_meta(lake, "note: x\n" + alias_bomb("label"))
    started = time.perf_counter()
    with pytest.raises(BatchError) as raised:
        open_batch(lake, PEOPLE, "b1", "csv")
    assert time.perf_counter() - started < 0.5
    assert str(raised.value) == f"{path}: line 4: YAML aliases (*name) are not accepted: write the value out"
