"""JSON as the CLI streams it and the service answers it: encoded fast, and whatever encoded before
still encodes the same once parsed."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from governance.cli.common import stream_json
from governance.jsontext import json_bytes, json_value


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


def test_a_version_s_rows_are_strict_json_with_nan_infinities_bytes_and_times_as_spark_s_to_json_writes_them():
    table = pa.table(
        {
            "value": [float("nan"), float("inf"), float("-inf"), 1.5],
            "blob": [b"\x00\xff", b"", None, b"ab"],
            "at": [datetime(1900, 1, 1, tzinfo=UTC)] * 4,
            "attrs": pa.array([[("k", 1.0)], [("k", float("nan"))], [], None], pa.map_(pa.string(), pa.float64())),
        }
    )

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    rows = json.loads(json.dumps(json_value(table.to_pylist())), parse_constant=refuse)

    assert [row["value"] for row in rows] == ["NaN", "Infinity", "-Infinity", 1.5]
    assert [row["blob"] for row in rows] == ["AP8=", "", None, "YWI="]
    assert rows[0]["at"] == "1900-01-01T00:00:00+00:00"
    assert [row["attrs"] for row in rows] == [[["k", 1.0]], [["k", "NaN"]], [], None]
