"""Many multiline JSON files: Spark infers the schema from one file of each shape, and reads them
all exactly as it would had it inferred it from every file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from governance import readers
from governance.batches import drop_batch, open_batch
from governance.errors import BatchError
from governance.jsonshapes import representatives
from tests.test_feeds import KEY, feed_spec, load

SHAPED = [
    [{"tick": 1, "price": 10}, {"tick": 2, "price": 11}],
    [{"tick": 3, "price": None}],
    {"tick": 4, "price": 12, "note": {"by": "desk", "tags": ["a"]}},
    [{"tick": 5, "price": 123456789012345678901234567890}],
    [{"tick": 6, "price": 1.5}],
    [{"tick": 7, "price": "13"}],
    [],
    [{"tick": 8, "price": 14, "tags": []}],
    [{"tick": 20, "price": 1, "note": ""}],
    [{"tick": 21, "price": 1, "note": "x"}],
    [{"tick": 22, "price": 1, "note": 5}],
]
DOUBTFUL = [
    b"<html>502 Bad Gateway</html>",
    b'\xef\xbb\xbf[{"tick": 9, "price": 1}]',
    b"[{'tick': 10, 'price': 2}]",
    b'[{"tick": 12, "price": 1e400}]',
    b"\xff\xfe not utf-8",
    b'[{"tick": 13, "price": 4}] trailing',
]


def many(tmp_path: Path, lake, extra: dict[str, bytes] | None = None):
    spec = load(feed_spec(tmp_path / "specs", "https://prices.example/list"))[KEY]
    files = {}
    for copy in range(5):
        for index, document in enumerate(SHAPED):
            files[f"d{copy}_{index:02d}.json"] = json.dumps(document).encode()
    for index, body in enumerate(DOUBTFUL):
        files[f"x_{index:02d}.json"] = body
    drop_batch(lake, KEY, "many", {**files, **(extra or {})})
    return spec, open_batch(lake, KEY, "many", "json", downloads=True)


@pytest.fixture
def batch(tmp_path: Path, lake):
    return many(tmp_path, lake)


def test_one_file_of_each_shape_and_every_doubtful_one_is_sampled(batch):
    _, opened_batch = batch
    chosen = [f.path.name for f in representatives(opened_batch.files)]
    assert sorted(chosen) == sorted(
        [f"d0_{i:02d}.json" for i in range(len(SHAPED))] + [f"x_{i:02d}.json" for i in range(len(DOUBTFUL))]
    )


def test_the_sampled_schema_reads_every_file_as_inferring_from_all_would(spark, batch, monkeypatch):
    spec, opened_batch = batch
    assert len(opened_batch.files) >= readers.SHAPES_FROM_FILES
    sampled = readers._json_frame(spark, spec, opened_batch)
    monkeypatch.setattr(readers, "SHAPES_FROM_FILES", 10**9)
    inferred = readers._json_frame(spark, spec, opened_batch)
    assert sampled.schema == inferred.schema
    assert sorted(map(repr, sampled.collect())) == sorted(map(repr, inferred.collect()))


def test_a_file_with_a_key_twice_but_for_case_is_sampled_and_refused_as_before(spark, tmp_path: Path, lake):
    spec, opened_batch = many(tmp_path, lake, {"z_twin.json": b'[{"tick": 11, "Tick": 12, "price": 3}]'})
    assert "z_twin.json" in [f.path.name for f in representatives(opened_batch.files)]
    with pytest.raises(BatchError, match="two fields are named tick but for case"):
        readers._json_frame(spark, spec, opened_batch)
