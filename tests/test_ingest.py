"""Governed ingestion of DropZone batches: what lands, what is quarantined, and why."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from governance.batches import open_batch
from governance.catalog.ledgerfilter import LedgerFilter
from governance.errors import BatchError, DuplicateBatch, NotFound
from governance.ingest import ingest, write_while_scanning
from governance.ledger import Action, entries
from governance.runs import RunRequest
from governance.zones import AssetKey, new_attempt_id
from tests.conftest import DATA, drop
from tests.helpers import assert_nothing_committed, sha256_file

BATCHES = DATA / "batches"
BOB = RunRequest(requested_by="bob", run_id="run-1")


def land(spark, catalog, lake, test_specs, asset, batch_id, files, **kwargs):
    drop(lake, asset, batch_id, files)
    return ingest(spark, catalog, lake, test_specs[AssetKey.parse(asset)], BOB, batch_id=batch_id, **kwargs)


def rows(lake, version):
    return pq.read_table(lake.at(version.path)).to_pylist()


def quarantined(lake, version):
    folder = lake.at(version.quarantine_path)
    return [json.loads(line) for part in sorted(folder.glob("part-*.json")) for line in part.read_text().splitlines()]


def test_csv_batch_lands_as_version_1_with_manifest(spark, catalog, lake, test_specs):
    version = land(spark, catalog, lake, test_specs, "t/people", "b1", {"people.csv": BATCHES / "csv/good.csv"})
    assert (version.number, version.rows, version.rows_quarantined) == (1, 2, 0)
    assert rows(lake, version) == [{"id": 1, "name": "ann", "score": 1.5}, {"id": 2, "name": "bob", "score": 2.5}]
    manifest = lake.read_manifest(lake.at(version.path))
    assert manifest["version"] == 1 and manifest["data_version"] == version.data_version
    for entry in manifest["files"]:
        assert sha256_file(lake.at(version.path) / entry["path"]) == entry["sha256"]


def test_the_next_batch_is_the_next_version_and_the_first_is_untouched(spark, catalog, lake, test_specs):
    first = land(spark, catalog, lake, test_specs, "t/people", "b1", {"p.csv": BATCHES / "csv/good.csv"})
    before = {p.name: sha256_file(p) for p in lake.at(first.path).iterdir()}
    second = land(spark, catalog, lake, test_specs, "t/people", "b2", {"p.csv": BATCHES / "csv/wrong_types.csv"})
    assert second.number == 2
    assert {p.name: sha256_file(p) for p in lake.at(first.path).iterdir()} == before


def test_same_content_gives_same_data_version(spark, catalog, lake, test_specs):
    first = land(spark, catalog, lake, test_specs, "t/people", "b1", {"p.csv": BATCHES / "csv/good.csv"})
    again = land(spark, catalog, lake, test_specs, "t/people", "b2", {"p.csv": BATCHES / "csv/good.csv"}, force=True)
    assert again.number == 2 and again.data_version == first.data_version


def test_a_batch_with_already_ingested_files_is_refused(spark, catalog, lake, test_specs):
    land(spark, catalog, lake, test_specs, "t/people", "b1", {"p.csv": BATCHES / "csv/good.csv"})
    with pytest.raises(DuplicateBatch, match="same files as batch 'b1'.*t/people@1.*--force"):
        land(spark, catalog, lake, test_specs, "t/people", "b2", {"other.csv": BATCHES / "csv/good.csv"})
    assert len(catalog.versions(AssetKey.parse("t/people"))) == 1


def test_the_oldest_ready_batch_is_taken_when_none_is_named(spark, catalog, lake, test_specs):
    drop(lake, "t/people", "b1", {"p.csv": BATCHES / "csv/good.csv"})
    version = ingest(spark, catalog, lake, test_specs[AssetKey.parse("t/people")], BOB)
    assert catalog.batch_by_id(AssetKey.parse("t/people"), "b1")[1].number == version.number
    with pytest.raises(NotFound, match="no ready batch"):
        ingest(spark, catalog, lake, test_specs[AssetKey.parse("t/people")], BOB)


def test_batch_metadata_is_recorded_with_source_file_hashes(spark, catalog, lake, test_specs):
    drop(lake, "t/people", "b1", {"p.csv": BATCHES / "csv/good.csv"}, requested_by="bob", label="15", note="first")
    version = ingest(spark, catalog, lake, test_specs[AssetKey.parse("t/people")], BOB, batch_id="b1")
    batch, files = catalog.sources_of([version.id])[version.id]
    assert (batch.requested_by, batch.label, batch.note, version.label) == ("bob", "15", "first", "15")
    assert [(lake.at(f.path).name, f.bytes, f.sha256) for f in files] == [
        ("p.csv", (BATCHES / "csv/good.csv").stat().st_size, sha256_file(BATCHES / "csv/good.csv"))
    ]


def test_the_ledger_records_request_and_commit(spark, catalog, lake, test_specs):
    land(spark, catalog, lake, test_specs, "t/people", "b1", {"p.csv": BATCHES / "csv/good.csv"})
    with catalog.session() as session:
        actions = [e.action for e in entries(session, LedgerFilter(asset="t/people"))]
    assert actions == [Action.SPEC_REGISTERED, Action.INGESTION_REQUESTED, Action.INGESTION_COMMITTED]


@pytest.mark.parametrize(
    ("file", "landed", "reason"),
    [
        ("too_many_fields.csv", [1, 3], "expected 3 fields, found 4"),
        ("too_few_fields.csv", [1, 3], "expected 3 fields, found 2"),
        ("bad_quoting.csv", [1, 3], "quot"),
        ("wrong_types.csv", [1, 4], "is not a valid int"),
        ("non_utf8.csv", [1, 3], "column name is not valid UTF-8"),
        ("embedded_newline.csv", [1, 3], "quot"),
        ("null_in_required.csv", [1, 4, 5], "is null but declared not nullable"),
    ],
)
def test_malformed_csv_rows_are_quarantined_with_a_reason(spark, catalog, lake, test_specs, file, landed, reason):
    version = land(spark, catalog, lake, test_specs, "t/people", "b1", {file: BATCHES / "csv" / file})
    assert sorted(r["id"] for r in rows(lake, version)) == landed
    refused = quarantined(lake, version)
    assert version.rows_quarantined == len(refused) >= 1
    assert all(r["file"].endswith(file) for r in refused)
    assert any(reason in r["reason"] for r in refused), refused
    requested = entries_for(catalog, Action.INGESTION_COMMITTED)[0]
    assert requested["rows_read"] == version.rows + version.rows_quarantined


def entries_for(catalog, action):
    with catalog.session() as session:
        return [json.loads(e.details) for e in entries(session, LedgerFilter(action=action))]


def test_wrong_types_name_the_column_and_type(spark, catalog, lake, test_specs):
    version = land(spark, catalog, lake, test_specs, "t/people", "b1", {"w.csv": BATCHES / "csv/wrong_types.csv"})
    reasons = sorted(r["reason"] for r in quarantined(lake, version))
    assert reasons == ["column id is not a valid int", "column score is not a valid double"]
    assert any("x2" in r["record"] for r in quarantined(lake, version))


def test_a_utf8_bom_is_accepted(spark, catalog, lake, test_specs):
    version = land(spark, catalog, lake, test_specs, "t/people", "b1", {"bom.csv": BATCHES / "csv/bom.csv"})
    assert [r["id"] for r in rows(lake, version)] == [1, 2]


def test_a_write_the_scan_finds_pointless_is_stopped_without_an_error(spark, lake, test_specs):
    spec = test_specs[AssetKey.parse("t/people")]
    drop(lake, "t/people", "b1", {"p.csv": BATCHES / "csv/good.csv"})
    batch = open_batch(lake, spec.key, "b1", "csv")
    with lake.staging(new_attempt_id()) as stage:
        written = write_while_scanning(spark, spec, batch, stage, stop_if=lambda scan: True)
    assert written.complete is False
    assert written.scan.record().files[0].sha256 == sha256_file(BATCHES / "csv/good.csv")


def test_files_already_ingested_under_another_batch_are_refused_and_the_refusal_is_in_the_ledger(
    spark, catalog, lake, test_specs
):
    land(spark, catalog, lake, test_specs, "t/people", "b1", {"p.csv": BATCHES / "csv/good.csv"})
    with pytest.raises(DuplicateBatch):
        land(spark, catalog, lake, test_specs, "t/people", "b2", {"p.csv": BATCHES / "csv/good.csv"})
    failed = entries_for(catalog, Action.INGESTION_FAILED)
    assert len(failed) == 1 and "same files as batch 'b1'" in failed[0]["error"]
    assert lake.staging_attempts() == []


def test_blank_lines_and_crlf_line_ends_are_not_rows(spark, catalog, lake, test_specs):
    version = land(
        spark, catalog, lake, test_specs, "t/people", "b1", {"crlf.csv": BATCHES / "csv/blank_lines_crlf.csv"}
    )
    assert [r["id"] for r in rows(lake, version)] == [1, 2]
    assert (version.rows_quarantined, version.quarantine_path) == (0, None)
    assert entries_for(catalog, Action.INGESTION_COMMITTED)[0]["rows_read"] == 2


def test_a_parquet_row_group_of_nulls_in_a_required_column_is_quarantined(spark, catalog, lake, test_specs):
    version = land(
        spark, catalog, lake, test_specs, "t/measures", "b1", {"m.parquet": BATCHES / "parquet/null_row_group.parquet"}
    )
    assert [r["sensor"] for r in rows(lake, version)] == ["s3", "s4"]
    assert version.rows_quarantined == 2
    assert entries_for(catalog, Action.INGESTION_COMMITTED)[0]["rows_read"] == 4


def test_each_file_of_a_batch_has_its_header(spark, catalog, lake, test_specs):
    files = {"a.csv": BATCHES / "csv/good.csv", "b.csv": BATCHES / "csv/too_many_fields.csv"}
    version = land(spark, catalog, lake, test_specs, "t/people", "b1", files)
    assert (version.rows, version.rows_quarantined) == (4, 1)
    assert entries_for(catalog, Action.INGESTION_COMMITTED)[0]["rows_read"] == 5


def test_embedded_newlines_land_when_the_spec_says_multiline(spark, catalog, lake, test_specs):
    version = land(
        spark, catalog, lake, test_specs, "t/people_multiline", "b1", {"n.csv": BATCHES / "csv/embedded_newline.csv"}
    )
    assert [r["name"] for r in rows(lake, version)] == ["ann", "bob\nby", "cid"]


def test_bad_rows_fail_the_batch_when_the_spec_says_fail(spark, catalog, lake, test_specs):
    with pytest.raises(
        Exception, match=r"1 of 3 rows .* bad_rows: fail; nothing was written. First: .*expected 3 fields"
    ):
        land(spark, catalog, lake, test_specs, "t/people_strict", "b1", {"f.csv": BATCHES / "csv/too_many_fields.csv"})
    assert_nothing_committed(catalog, lake, "t/people_strict")
    failed = entries_for(catalog, Action.INGESTION_FAILED)
    assert len(failed) == 1 and "bad_rows: fail" in failed[0]["error"]


def test_too_many_bad_rows_fail_the_batch(spark, catalog, lake, test_specs):
    with pytest.raises(Exception, match="more than max_bad_fraction 0.5"):
        land(spark, catalog, lake, test_specs, "t/people", "b1", {"t.csv": BATCHES / "csv/mostly_bad.csv"})
    assert_nothing_committed(catalog, lake, "t/people")


@pytest.mark.parametrize(
    ("asset", "file", "message"),
    [
        ("t/people", "csv/header_missing.csv", "header does not match the spec of t/people: missing name"),
        ("t/people", "csv/header_extra.csv", "unexpected age"),
        (
            "t/people",
            "csv/header_reordered.csv",
            "columns out of order: found name, id, score; expected id, name, score",
        ),
        ("t/people", "csv/empty.csv", "the file is empty"),
        ("t/people", "csv/header_only.csv", "holds no rows"),
        ("t/people", "other/binary.csv", "header does not match the spec of t/people: missing id, name, score"),
        ("t/events", "json/not_json.json", "not JSON: expected JSON objects, one per line"),
        ("t/events", "json/extra_field.json", "columns do not match the spec: unexpected referrer"),
        (
            "t/measures",
            "parquet/other_schema.parquet",
            "Parquet schema does not match the spec of t/measures: missing value; unexpected reading",
        ),
        (
            "t/measures",
            "parquet/wrong_type.parquet",
            "Parquet schema does not match the spec of t/measures: value is long, expected double",
        ),
        ("t/measures", "csv/good.csv", "not a Parquet file"),
    ],
)
def test_bad_files_are_refused_with_a_clear_message_and_nothing_changes(
    spark, catalog, lake, test_specs, asset, file, message
):
    with pytest.raises(BatchError, match=message) as raised:
        land(spark, catalog, lake, test_specs, asset, "b1", {Path(file).name: BATCHES / file})
    if "header" in message or "file is empty" in message:
        assert Path(file).name in str(raised.value)
    assert_nothing_committed(catalog, lake, asset)


def test_a_batch_without_ready_marker_is_refused(spark, catalog, lake, test_specs):
    folder = drop(lake, "t/people", "b1", {"p.csv": BATCHES / "csv/good.csv"})
    (folder / "_READY").unlink()
    with pytest.raises(BatchError, match="not marked ready: create .*_READY"):
        ingest(spark, catalog, lake, test_specs[AssetKey.parse("t/people")], BOB, batch_id="b1")
    assert_nothing_committed(catalog, lake, "t/people")


def test_an_empty_batch_is_refused(spark, catalog, lake, test_specs):
    drop(lake, "t/people", "b1", {})
    with pytest.raises(BatchError, match="is empty: .* holds no data file"):
        ingest(spark, catalog, lake, test_specs[AssetKey.parse("t/people")], BOB, batch_id="b1")
    assert_nothing_committed(catalog, lake, "t/people")


def test_a_symlink_out_of_the_dropzone_is_refused(spark, catalog, lake, test_specs, tmp_path):
    secret = tmp_path / "secret.csv"
    secret.write_bytes((BATCHES / "csv/good.csv").read_bytes())
    folder = drop(lake, "t/people", "b1", {})
    (folder / "link.csv").symlink_to(secret)
    with pytest.raises(BatchError, match="symlink that points outside the DropZone"):
        ingest(spark, catalog, lake, test_specs[AssetKey.parse("t/people")], BOB, batch_id="b1")
    assert_nothing_committed(catalog, lake, "t/people")


@pytest.mark.parametrize("batch_id", ["../b1", "a/b", "..\\b", "b\x00", "x" * 200, "", ".."])
def test_unsafe_batch_ids_are_refused(spark, catalog, lake, test_specs, batch_id):
    with pytest.raises(BatchError, match="invalid batch id"):
        ingest(spark, catalog, lake, test_specs[AssetKey.parse("t/people")], BOB, batch_id=batch_id)


def test_json_nested_objects_are_flattened_and_typed(spark, catalog, lake, test_specs):
    version = land(spark, catalog, lake, test_specs, "t/events", "b1", {"e.json": BATCHES / "json/nested.json"})
    assert rows(lake, version) == [
        {"id": 1, "kind": "click", "user__name": "ann", "user__age": 31},
        {"id": 2, "kind": "view", "user__name": "bob", "user__age": 42},
    ]


def test_json_lines_that_are_not_objects_or_break_types_are_quarantined(spark, catalog, lake, test_specs):
    version = land(spark, catalog, lake, test_specs, "t/events", "b1", {"e.json": BATCHES / "json/some_bad_lines.json"})
    assert sorted(r["id"] for r in rows(lake, version)) == [1, 4]
    assert sorted(r["reason"] for r in quarantined(lake, version)) == [
        "column user__age is not a valid int",
        "not valid JSON: expecting value at character 1",
    ]


def test_json_null_in_a_required_column_is_quarantined_and_counted(spark, catalog, lake, test_specs):
    version = land(
        spark, catalog, lake, test_specs, "t/events", "b1", {"e.json": BATCHES / "json/null_in_required.json"}
    )
    assert sorted(r["id"] for r in rows(lake, version)) == [1, 3]
    assert [r["reason"] for r in quarantined(lake, version)] == ["column id is null but declared not nullable"]
    assert entries_for(catalog, Action.INGESTION_COMMITTED)[0]["rows_read"] == 3


def test_json_without_declared_columns_keeps_the_inferred_schema(spark, catalog, lake, test_specs):
    version = land(
        spark, catalog, lake, test_specs, "t/events_inferred", "b1", {"e.json": BATCHES / "json/nested.json"}
    )
    assert sorted(rows(lake, version)[0]) == ["id", "kind", "user__age", "user__name"]


def test_parquet_lands_as_is_and_nulls_in_required_columns_are_quarantined(spark, catalog, lake, test_specs):
    version = land(
        spark,
        catalog,
        lake,
        test_specs,
        "t/measures",
        "b1",
        {"a.parquet": BATCHES / "parquet/good.parquet", "b.parquet": BATCHES / "parquet/null_sensor.parquet"},
    )
    assert (version.rows, version.rows_quarantined) == (4, 1)
    assert quarantined(lake, version)[0]["reason"] == "column sensor is null but declared not nullable"
