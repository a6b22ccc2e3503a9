"""JSON as the CLI streams it and the service answers it: encoded fast, and whatever encoded before
still encodes the same once parsed."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from datetime import UTC, datetime
from pathlib import Path

from governance.cli.common import stream_json
from governance.jsontext import json_bytes


def nested(levels: int) -> dict:
    """A lineage tree as long as `levels` versions in a chain, each the input of the next."""
    root: dict = {"asset": "t/a", "version": 1, "inputs": []}
    node = root
    for version in range(2, levels + 1):
        child = {"asset": "t/a", "version": version, "inputs": []}
        node["inputs"].append(child)
        node = child
    return root


def test_a_lineage_nested_deeper_than_the_fast_encoder_goes_is_encoded_all_the_same():
    tree = nested(400)

    assert json.loads(json_bytes(tree)) == tree


def test_what_json_has_no_type_for_is_written_as_the_standard_library_writes_it():
    data = {"at": datetime(2026, 11, 27, 5, 0, tzinfo=UTC), "path": Path("landing/t/a"), 7: "seven", "big": 2**70}

    assert json.loads(json_bytes(data)) == json.loads(json.dumps(data, default=str))


def test_a_stream_to_a_stdout_of_text_alone_is_the_same_array():
    items = [{"asset": "t/a", "version": n, "name": "café"} for n in range(3)]
    captured = io.StringIO()

    with redirect_stdout(captured):
        stream_json(iter(items))

    assert json.loads(captured.getvalue()) == items


def test_a_stream_s_first_item_is_written_out_before_the_next_is_asked_for():
    written = io.BytesIO()
    stdout = io.TextIOWrapper(io.BufferedWriter(written, buffer_size=1 << 16), encoding="utf-8")
    seen_before_second: list[bytes] = []

    def items():
        yield {"asset": "t/a", "version": 1}
        seen_before_second.append(written.getvalue())
        yield {"asset": "t/a", "version": 2}

    with redirect_stdout(stdout):
        stream_json(items())

    assert seen_before_second[0].startswith(b"[\n") and b'"version":1' in seen_before_second[0]
    assert json.loads(written.getvalue()) == [{"asset": "t/a", "version": 1}, {"asset": "t/a", "version": 2}]
