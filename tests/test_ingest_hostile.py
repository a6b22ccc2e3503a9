"""Batches a careless or hostile producer drops: refused or quarantined with one clear line naming the
file, nothing written, the refusal in the ledger, and Spark still usable for the next batch."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from governance.catalog.ledgerfilter import LedgerFilter
from governance.errors import BatchError, NotFound
from governance.ingest import ingest
from governance.ledger import Action, entries
from governance.runs import RunRequest
from governance.zones import AssetKey
from tests.conftest import DATA, drop
from tests.helpers import assert_nothing_committed

BATCHES = DATA / "batches"
BOB = RunRequest(requested_by="bob", run_id="run-1")
GOOD_CSV = (BATCHES / "csv/good.csv").read_bytes()


def ingest_batch(spark, catalog, lake, test_specs, asset, batch_id, **kwargs):
    return ingest(spark, catalog, lake, test_specs[AssetKey.parse(asset)], BOB, batch_id=batch_id, **kwargs)


def land(spark, catalog, lake, test_specs, asset, batch_id, files):
    drop(lake, asset, batch_id, files)
    return ingest_batch(spark, catalog, lake, test_specs, asset, batch_id)


def quarantined(lake, version):
    folder = lake.at(version.quarantine_path)
    return [json.loads(line) for part in sorted(folder.glob("part-*.json")) for line in part.read_text().splitlines()]


def ledger_actions(catalog, asset):
    with catalog.session() as session:
        return [(e.action, json.loads(e.details)) for e in entries(session, LedgerFilter(asset=asset))]


def still_usable(spark, catalog, lake, test_specs):
    """The next batch of another asset lands: the Spark session survived."""
    version = land(spark, catalog, lake, test_specs, "t/people", "after", {"p.csv": GOOD_CSV})
    assert version.rows == 2


def test_a_hard_link_to_a_file_outside_the_dropzone_is_refused_before_it_is_read(
    spark, catalog, lake, test_specs, tmp_path
):
    secret = tmp_path / "secret.csv"
    secret.write_bytes(GOOD_CSV)
    folder = drop(lake, "t/people", "b1", {})
    os.link(secret, folder / "linked.csv")
    with pytest.raises(BatchError, match=r"linked\.csv: a hard link \(2 names for one file\) is refused"):
        ingest_batch(spark, catalog, lake, test_specs, "t/people", "b1")
    assert_nothing_committed(catalog, lake, "t/people")


def test_a_symlink_to_another_assets_dropzone_folder_is_refused(spark, catalog, lake, test_specs):
    other = drop(lake, "t/events", "theirs", {"e.csv": GOOD_CSV})
    folder = drop(lake, "t/people", "b1", {})
    (folder / "borrowed.csv").symlink_to(other / "e.csv")
    with pytest.raises(
        BatchError, match=r"borrowed\.csv: a symlink that points outside the DropZone folder .*/drop/t/people"
    ):
        ingest_batch(spark, catalog, lake, test_specs, "t/people", "b1")
    assert_nothing_committed(catalog, lake, "t/people")


@pytest.mark.parametrize("link", ["symlink", "hard link"])
def test_a_batch_yaml_that_is_a_link_is_refused_before_it_is_read(spark, catalog, lake, test_specs, tmp_path, link):
    secret = tmp_path / "secret.yaml"
    secret.write_text("label: TOP-SECRET-VALUE\n")
    folder = drop(lake, "t/people", "b1", {"p.csv": GOOD_CSV})
    if link == "symlink":
        (folder / "_batch.yaml").symlink_to(secret)
    else:
        os.link(secret, folder / "_batch.yaml")
    with pytest.raises(BatchError, match=r"_batch\.yaml: a (symlink is refused here|hard link)") as raised:
        ingest_batch(spark, catalog, lake, test_specs, "t/people", "b1")
    assert "TOP-SECRET" not in str(raised.value)
    assert_nothing_committed(catalog, lake, "t/people")
    assert "TOP-SECRET" not in json.dumps(ledger_actions(catalog, "t/people"))


def test_two_names_for_one_file_inside_a_batch_are_refused_too(spark, catalog, lake, test_specs):
    folder = drop(lake, "t/people", "b1", {"a.csv": GOOD_CSV})
    os.link(folder / "a.csv", folder / "b.csv")
    with pytest.raises(BatchError, match="a hard link"):
        ingest_batch(spark, catalog, lake, test_specs, "t/people", "b1")
    assert_nothing_committed(catalog, lake, "t/people")


@pytest.mark.parametrize(
    ("name", "decoy"),
    [
        ("a[1].csv", "a1.csv"),
        ("b*.csv", "bx.csv"),
        ("c?.csv", "cx.csv"),
        ("d{x,y}.csv", "dx.csv"),
        ("e\\f.csv", None),
        ("g h%20#i.csv", None),
        ("caf\u00e9.csv", None),
    ],
)
def test_file_names_holding_glob_or_url_characters_are_read_as_they_are(spark, catalog, lake, test_specs, name, decoy):
    """Each file is read once, by its own name: a glob would also read the decoy its name matches."""
    files = {name: GOOD_CSV + b"x,bad,row\n", **({decoy: b"id,name,score\n9,zed,9.5\n"} if decoy else {})}
    version = land(spark, catalog, lake, test_specs, "t/people", "b1", files)
    assert (version.rows, version.rows_quarantined) == (3 if decoy else 2, 1)
    assert [r["file"] for r in quarantined(lake, version)] == [
        str(lake.batch_dir(AssetKey.parse("t/people"), "b1") / name)
    ]
    assert "not a file of the DropZone batch" not in (version.column_lineage or "")


def test_a_file_name_with_a_colon_is_refused_with_the_rule(spark, catalog, lake, test_specs):
    drop(lake, "t/people", "b1", {"export-10:30.csv": GOOD_CSV})
    with pytest.raises(BatchError, match=r"export-10:30\.csv: a file name may not hold ':'"):
        ingest_batch(spark, catalog, lake, test_specs, "t/people", "b1")
    assert_nothing_committed(catalog, lake, "t/people")


def test_a_header_mismatch_names_the_header_columns_and_nothing_else_of_the_file(spark, catalog, lake, test_specs):
    header = "id,[red]name[/red],:x:," + "w" * 500
    drop(lake, "t/people", "b1", {"p.csv": f"{header}\nsecret-value,1,2,3\n".encode()})
    with pytest.raises(BatchError) as raised:
        ingest_batch(spark, catalog, lake, test_specs, "t/people", "b1")
    message = str(raised.value)
    assert "secret-value" not in message and "w" * 100 not in message
    assert "unexpected [red]name[/red], :x:, www" in message


def test_a_file_that_is_not_json_is_refused_without_showing_its_content(spark, catalog, lake, test_specs):
    drop(lake, "t/events", "b1", {"e.json": b"password=hunter2;user=ann\n"})
    with pytest.raises(BatchError, match=r"e\.json: not JSON: expected JSON objects, one per line") as raised:
        ingest_batch(spark, catalog, lake, test_specs, "t/events", "b1")
    assert "hunter2" not in str(raised.value)


def deep(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def test_json_nested_too_deep_is_quarantined_by_line_and_spark_survives(spark, catalog, lake, test_specs):
    lines = [json.dumps({"id": i, "kind": "k", "user": {"name": "n", "age": 1}}) for i in range(40)]
    lines.insert(7, deep(500))
    version = land(spark, catalog, lake, test_specs, "t/events", "b1", {"e.json": ("\n".join(lines) + "\n").encode()})
    assert (version.rows, version.rows_quarantined) == (40, 1)
    assert [r["reason"] for r in quarantined(lake, version)] == ["not valid JSON: nested deeper than 64 levels"]
    still_usable(spark, catalog, lake, test_specs)


def test_a_json_file_of_one_document_nested_too_deep_fails_with_one_line_and_spark_survives(
    spark, catalog, lake, test_specs
):
    with pytest.raises(
        BatchError, match=r"no line of deep\.json is a JSON object: not valid JSON: nested deeper than 64 levels"
    ):
        land(spark, catalog, lake, test_specs, "t/events", "b1", {"deep.json": (deep(500) + "\n").encode()})
    assert_nothing_committed(catalog, lake, "t/events")
    still_usable(spark, catalog, lake, test_specs)


def test_json_nested_64_deep_still_lands(spark, catalog, lake, test_specs):
    version = land(spark, catalog, lake, test_specs, "t/events_inferred", "b1", {"e.json": (deep(64) + "\n").encode()})
    assert version.rows == 1


def corrupt_parquet(path: Path) -> bytes:
    """A Parquet file whose magic bytes and footer are intact and whose data pages are not."""
    table = pa.table({"sensor": [f"s{i}" for i in range(500)], "value": [float(i) for i in range(500)]})
    pq.write_table(table, path)
    data = bytearray(path.read_bytes())
    data[8:300] = b"\xab" * 292
    return bytes(data)


def test_a_parquet_file_with_a_corrupt_body_fails_with_one_line_and_spark_survives(
    spark, catalog, lake, test_specs, tmp_path
):
    drop(lake, "t/measures", "b1", {"m.parquet": corrupt_parquet(tmp_path / "m.parquet")})
    with pytest.raises(BatchError) as raised:
        ingest_batch(spark, catalog, lake, test_specs, "t/measures", "b1")
    message = str(raised.value)
    assert message.startswith(
        str(lake.batch_dir(AssetKey.parse("t/measures"), "b1") / "m.parquet") + ": cannot be read as Parquet:"
    )
    assert "\n" not in message and len(message) < 400
    assert_nothing_committed(catalog, lake, "t/measures")
    still_usable(spark, catalog, lake, test_specs)


def test_a_parquet_file_with_a_corrupt_footer_is_refused_naming_it(spark, catalog, lake, test_specs, tmp_path):
    data = bytearray(corrupt_parquet(tmp_path / "m.parquet"))
    footer = int.from_bytes(data[-8:-4], "little")
    data[-8 - footer : -8] = b"\x11" * footer
    drop(lake, "t/measures", "b1", {"m.parquet": bytes(data)})
    with pytest.raises(BatchError, match=r"m\.parquet: cannot be read as Parquet: its footer"):
        ingest_batch(spark, catalog, lake, test_specs, "t/measures", "b1")
    assert_nothing_committed(catalog, lake, "t/measures")


def test_json_fields_that_flatten_to_one_name_are_refused_naming_both(spark, catalog, lake, test_specs):
    drop(lake, "t/events_inferred", "b1", {"e.json": b'{"a__b": 1, "a": {"b": 2}}\n'})
    with pytest.raises(BatchError, match=r"fields a\.b and a__b would both land as column a__b"):
        ingest_batch(spark, catalog, lake, test_specs, "t/events_inferred", "b1")
    assert_nothing_committed(catalog, lake, "t/events_inferred")


def test_json_fields_that_differ_only_in_case_are_refused_naming_both(spark, catalog, lake, test_specs):
    drop(lake, "t/events_inferred", "b1", {"e.json": b'{"id": 1, "ID": 2}\n'})
    with pytest.raises(
        BatchError, match=r"e\.json: two fields are named id but for case, which Spark cannot tell apart"
    ):
        ingest_batch(spark, catalog, lake, test_specs, "t/events_inferred", "b1")
    assert_nothing_committed(catalog, lake, "t/events_inferred")


def committed_details(catalog, asset):
    return next(details for action, details in ledger_actions(catalog, asset) if action == Action.INGESTION_COMMITTED)


@pytest.mark.parametrize("padding", [0, 20_000], ids=["in the first 8 KB", "after 8 KB"])
def test_a_control_character_quarantines_its_row_wherever_it_is_and_its_line_is_recorded(
    spark, catalog, lake, test_specs, padding
):
    good = [f"{i},name{i},{i}.5" for i in range(3, 3 + padding // 16)]
    lines = ["id,name,score", "1,ann,1.5", *good, "2,b\x00b,2.5", "99,zed,9.5"]
    version = land(spark, catalog, lake, test_specs, "t/people", "b1", {"p.csv": ("\n".join(lines) + "\n").encode()})
    assert (version.rows, version.rows_quarantined) == (len(lines) - 2, 1)
    (refused,) = quarantined(lake, version)
    assert refused["reason"] == "column name holds control character U+0000"
    assert committed_details(catalog, "t/people")["control_characters"] == [
        {"file": "p.csv", "line": len(lines) - 1, "character": "U+0000"}
    ]


def test_a_control_character_in_a_typed_column_is_named_too(spark, catalog, lake, test_specs):
    version = land(
        spark, catalog, lake, test_specs, "t/people", "b1", {"p.csv": b"id,name,score\n1,a,1.5\n2\x07,b,2.5\n"}
    )
    assert [r["reason"] for r in quarantined(lake, version)] == ["holds control character U+0007"]


def test_control_characters_in_json_quarantine_their_row(spark, catalog, lake, test_specs):
    lines = [
        '{"id": 1, "kind": "a"}',
        '{"id": 2, "kind": "b\x01"}',
        *(f'{{"id": {i}, "kind": "c"}}' for i in range(3, 201)),
    ]
    version = land(
        spark, catalog, lake, test_specs, "t/events_inferred", "b1", {"e.json": ("\n".join(lines) + "\n").encode()}
    )
    assert [r["reason"] for r in quarantined(lake, version)] == ["not valid JSON: holds control character U+0001"]
    assert committed_details(catalog, "t/events_inferred")["control_characters"] == [
        {"file": "e.json", "line": 2, "character": "U+0001"}
    ]


def test_control_characters_written_as_json_escapes_quarantine_their_row(spark, catalog, lake, test_specs):
    lines = [
        '{"id": 1, "kind": "a\\tb"}',
        '{"id": 2, "kind": "\\u001b[31mred"}',
        *(f'{{"id": {i}, "kind": "c"}}' for i in range(3, 201)),
    ]
    version = land(
        spark, catalog, lake, test_specs, "t/events_inferred", "b1", {"e.json": ("\n".join(lines) + "\n").encode()}
    )
    assert (version.rows, version.rows_quarantined) == (199, 1)
    assert [r["reason"] for r in quarantined(lake, version)] == ["column kind holds control character U+001B"]
    assert committed_details(catalog, "t/events_inferred")["control_characters"] == [
        {"file": "e.json", "line": 2, "character": "U+001B"}
    ]


def test_a_json_field_named_with_a_control_character_is_refused(spark, catalog, lake, test_specs):
    drop(lake, "t/events_inferred", "b1", {"e.json": b'{"id": 1, "k\\u0007ind": "a"}\n'})
    with pytest.raises(BatchError, match=r"field k\\x07ind holds a control character; rename it"):
        ingest_batch(spark, catalog, lake, test_specs, "t/events_inferred", "b1")
    assert_nothing_committed(catalog, lake, "t/events_inferred")


def test_tabs_and_line_ends_are_not_control_characters_that_refuse_a_row(spark, catalog, lake, test_specs):
    version = land(spark, catalog, lake, test_specs, "t/people", "b1", {"p.csv": b"id,name,score\r\n1,a\tb,1.5\r\n"})
    assert (version.rows, version.rows_quarantined) == (1, 0)


def refusal(lake, tmp_path, kind):
    """Drop a batch that is refused before anything is staged; return its id."""
    if kind == "no ready batch":
        return None
    files = {"p.csv": b"id,nom,score\n1,a,1.5\n" if kind == "bad header" else GOOD_CSV}
    folder = drop(lake, "t/people", "b1", {} if kind in ("empty batch", "symlink", "sub-folder") else files)
    if kind == "symlink":
        outside = tmp_path / "outside.csv"
        outside.write_bytes(GOOD_CSV)
        (folder / "p.csv").symlink_to(outside)
    elif kind == "sub-folder":
        (folder / "nested").mkdir()
    elif kind == "bad _batch.yaml":
        (folder / "_batch.yaml").write_text("who: bob\n")
    elif kind == "not ready":
        (folder / "_READY").unlink()
    return "b1"


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("no ready batch", "no ready batch of t/people in "),
        ("empty batch", "is empty"),
        ("symlink", "symlink that points outside the DropZone"),
        ("sub-folder", "sub-folders are not ingested"),
        ("bad _batch.yaml", "who: unknown key"),
        ("not ready", "not marked ready"),
        ("bad header", "header does not match"),
    ],
)
def test_a_refusal_before_staging_is_an_ingestion_failed_entry_with_its_reason(
    spark, catalog, lake, test_specs, tmp_path, kind, reason
):
    batch_id = refusal(lake, tmp_path, kind)
    with pytest.raises((BatchError, NotFound)):
        ingest_batch(spark, catalog, lake, test_specs, "t/people", batch_id)
    recorded = ledger_actions(catalog, "t/people")
    assert [action for action, _ in recorded] == [Action.INGESTION_FAILED]
    details = recorded[0][1]
    assert reason in details["error"] and details["batch"] == batch_id
    assert_nothing_committed(catalog, lake, "t/people")


def test_a_refused_oldest_ready_batch_is_named_in_the_ledger(spark, catalog, lake, test_specs):
    drop(lake, "t/people", "oldest", {"p.csv": b"id,nom,score\n1,a,1.5\n"})
    with pytest.raises(BatchError, match="header does not match"):
        ingest_batch(spark, catalog, lake, test_specs, "t/people", None)
    [(action, details)] = ledger_actions(catalog, "t/people")
    assert action == Action.INGESTION_FAILED and details["batch"] == "oldest"
    assert_nothing_committed(catalog, lake, "t/people")
