"""DropZone batch checks done while hashing, before Spark reads anything."""

from __future__ import annotations

import pytest

from governance.batches import Utf8Check


def check(*blocks: bytes) -> bool:
    utf8 = Utf8Check()
    for block in blocks:
        utf8.feed(block)
    return utf8.valid


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
    assert check(*blocks) is valid
