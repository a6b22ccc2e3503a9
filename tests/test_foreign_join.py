"""Other tools' run events joined to a catalog's versions, in process, on SQLite and on PostgreSQL:
kept once, joined by a version's location, impact through foreign runs, a purged version, and
several threads reporting the same datasets at once."""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlmodel import func, select

from governance.catalog import Catalog
from governance.catalog.models import (
    ForeignColumn,
    ForeignDataset,
    ForeignEvent,
    ForeignIO,
    ForeignRun,
    LedgerEntry,
    VersionRow,
)
from governance.catalog.states import VersionStatus
from governance.errors import InvalidInput, TransactionLost
from governance.foreign.events import MAX_FIELD_DEPENDENCIES, RunEvent, parse
from governance.foreign.join import ROWS_AT_ONCE, Sql, receive
from governance.lineage.graph import impact
from governance.zones import Lake, VersionRef
from tests.graphs import add_version

pytestmark = pytest.mark.both_backends
PRODUCER = "https://example.com/reports"


VERSION_FACET = (
    "https://openlineage.io/spec/facets/1-0-1/DatasetVersionDatasetFacet.json#/$defs/DatasetVersionDatasetFacet"
)


def dataset(namespace: str, name: str, version: str | None = None) -> dict:
    facets = {"version": {"_producer": PRODUCER, "_schemaURL": VERSION_FACET, "datasetVersion": version}}
    return {"namespace": namespace, "name": name, **({"facets": facets} if version else {})}


def event(
    run_id: str,
    state: str,
    reads: list[str],
    writes: list[str],
    *,
    read: list[dict] = (),
    wrote: list[dict] = (),
    time: str = "2026-11-27T05:00:00Z",
    job: str | None = None,
) -> RunEvent:
    """A run event of `job` (one of its own by default) at `time` that read the files `reads` (and
    the datasets `read`) and wrote the tables `writes` (and `wrote`)."""
    [parsed] = parse(
        json.dumps(
            {
                "eventType": state,
                "eventTime": time,
                "producer": PRODUCER,
                "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
                "run": {"runId": run_id},
                "job": {"namespace": "airflow://reports", "name": job or f"job-{run_id[:8]}"},
                "inputs": [dataset("file", name) for name in reads] + list(read),
                "outputs": [dataset("postgres://warehouse", name) for name in writes] + list(wrote),
            }
        ).encode()
    )
    return parsed


def at(lake: Lake, location: str) -> str:
    return str(Path(lake.root).resolve() / location)


def test_an_event_sent_twice_is_kept_once_and_joined_to_the_version_it_read(catalog: Catalog, lake: Lake):
    add_version(catalog, "sales/clients", 1, zone="landing")
    run_id = str(uuid.uuid4())
    start = event(run_id, "START", [at(lake, "landing/sales/clients/v=1")], ["reports.daily"])
    [first] = receive(catalog, lake, [start], "lineage-bot")
    [again] = receive(catalog, lake, [start], "lineage-bot")

    assert (first.stored, first.inputs[0]["version"]) == (True, "sales/clients@1")
    assert (again.stored, again.inputs) == (False, [])
    with catalog.session() as session:
        assert session.exec(select(func.count()).select_from(ForeignEvent)).one() == 1
    [job] = impact(catalog, VersionRef.parse("sales/clients@1")).root.foreign
    assert (job.run_id, job.state, [o.name for o in job.outputs]) == (run_id, "START", ["reports.daily"])


def test_an_event_whose_joining_fails_is_kept_said_not_joined_and_leaves_nothing_of_the_join(
    catalog: Catalog, lake: Lake
):
    add_version(catalog, "sales/clients", 1, zone="landing")
    run_id = str(uuid.uuid4())

    def failing_judge(user: str | None, asset: str) -> str | None:
        raise InvalidInput(f"no policy to judge a read of {asset}")

    start = event(run_id, "START", [at(lake, "landing/sales/clients/v=1")], ["reports.daily"])
    [received] = receive(catalog, lake, [start], "lineage-bot", failing_judge)

    assert received.stored and received.unjoined == "no policy to judge a read of sales/clients"
    with catalog.session() as session:
        assert session.exec(select(func.count()).select_from(ForeignEvent)).one() == 1
        # The run was recorded before the judge failed: the joining's savepoint took it back.
        assert session.exec(select(func.count()).select_from(ForeignRun)).one() == 0
        assert session.exec(select(func.count()).select_from(ForeignIO)).one() == 0


def test_a_report_of_more_events_than_one_statement_takes_is_kept_and_joined_whole(catalog: Catalog, lake: Lake):
    add_version(catalog, "sales/clients", 1, zone="landing")
    reads = [at(lake, "landing/sales/clients/v=1")]
    events = [event(str(uuid.uuid4()), "START", reads, ["reports.daily"]) for _ in range(ROWS_AT_ONCE + 1)]

    # The first event again, past the first statement's rows: kept once all the same.
    received = receive(catalog, lake, [*events, events[0]], "lineage-bot")

    assert [each.stored for each in received] == [True] * len(events) + [False]
    assert {each.inputs[0]["version"] for each in received[:-1]} == {"sales/clients@1"}
    with catalog.session() as session:
        assert session.exec(select(func.count()).select_from(ForeignEvent)).one() == len(events)
        assert session.exec(select(func.count()).select_from(ForeignIO)).one() == 2 * len(events)


def test_impact_crosses_foreign_runs_where_the_versions_of_a_dataset_agree(catalog: Catalog, lake: Lake):
    add_version(catalog, "sales/clients", 1, zone="landing")
    copy, same, unversioned, other = (str(uuid.uuid4()) for _ in range(4))
    staged = "postgres://warehouse", "staging.clients"
    reads = [at(lake, "landing/sales/clients/v=1")]
    receive(catalog, lake, [event(copy, "COMPLETE", reads, [], wrote=[dataset(*staged, "3")])], "bot")
    for run_id, version in ((same, "3"), (unversioned, None), (other, "7")):
        receive(catalog, lake, [event(run_id, "COMPLETE", [], [], read=[dataset(*staged, version)])], "bot")

    [copied] = impact(catalog, VersionRef.parse("sales/clients@1")).root.foreign
    [written] = copied.outputs
    assert (written.name, written.version) == ("staging.clients", "3")
    assert {reader.run_id for reader in written.read_by} == {same, unversioned}


def test_an_event_about_a_purged_version_still_joins_it(catalog: Catalog, lake: Lake):
    version_id = add_version(catalog, "sales/clients", 1, zone="landing")
    with catalog.session() as session:
        row = session.get(VersionRow, version_id)
        assert row is not None
        row.status = VersionStatus.PURGED.value
        session.add(row)
    [received] = receive(
        catalog, lake, [event(str(uuid.uuid4()), "COMPLETE", [at(lake, "landing/sales/clients/v=1")], [])], "bot"
    )
    assert received.inputs[0]["version"] == "sales/clients@1"


def test_threads_reporting_the_same_datasets_at_once_record_each_dataset_once(catalog: Catalog, lake: Lake):
    add_version(catalog, "sales/clients", 1, zone="landing")
    reads = [at(lake, "landing/sales/clients/v=1")]

    def report(_: int) -> bool:
        [received] = receive(catalog, lake, [event(str(uuid.uuid4()), "START", reads, ["reports.shared"])], "bot")
        return received.stored

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(report, range(40)))
    with catalog.session() as session:
        assert session.exec(select(func.count()).select_from(ForeignDataset)).one() == 2
    assert len(impact(catalog, VersionRef.parse("sales/clients@1")).root.foreign) == 40


COLUMN_LINEAGE = (
    "https://openlineage.io/spec/facets/1-2-0/ColumnLineageDatasetFacet.json#/$defs/ColumnLineageDatasetFacet"
)


def written_with_columns(name: str, fields: dict[str, list[tuple[str, str, str]]]) -> dict:
    """A table written, each column from (namespace, name, field)s, DIRECT IDENTITY."""
    identity = [{"type": "DIRECT", "subtype": "IDENTITY"}]
    facet = {
        "_producer": PRODUCER,
        "_schemaURL": COLUMN_LINEAGE,
        "fields": {
            column: {
                "inputFields": [
                    {"namespace": ns, "name": n, "field": f, "transformations": identity} for ns, n, f in inputs
                ]
            }
            for column, inputs in fields.items()
        },
    }
    return {"namespace": "postgres://warehouse", "name": name, "facets": {"columnLineage": facet}}


def completed(outputs: list[dict]) -> dict:
    """A COMPLETE run event's body that wrote `outputs`, not parsed yet."""
    return {
        "eventType": "COMPLETE",
        "eventTime": "2026-11-27T05:00:00Z",
        "producer": PRODUCER,
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "run": {"runId": str(uuid.uuid4())},
        "job": {"namespace": "airflow://reports", "name": "reports"},
        "outputs": outputs,
    }


def test_column_lineage_sent_twice_is_kept_once_with_its_inputs_named_as_the_versions_read(
    catalog: Catalog, lake: Lake
):
    add_version(catalog, "sales/clients", 1, zone="landing")
    run_id, clients = str(uuid.uuid4()), at(lake, "landing/sales/clients/v=1")
    wrote = written_with_columns("reports.names", {"name": [("file", clients, "name")]})
    for state in ("START", "COMPLETE"):
        receive(catalog, lake, [event(run_id, state, [clients], [], wrote=[wrote])], "bot")

    with catalog.session() as session:
        assert session.exec(select(func.count()).select_from(ForeignColumn)).one() == 1
    [job] = impact(catalog, VersionRef.parse("sales/clients@1")).root.foreign
    [written] = job.outputs
    assert written.columns is not None
    assert [(f["version"], f["field"]) for f in written.columns["columns"]["name"]] == [("sales/clients@1", "name")]


def test_a_column_lineage_facet_not_shaped_as_the_spec_says_is_refused_whatever_schema_it_names():
    facet = {"_producer": PRODUCER, "_schemaURL": "https://example.com/own.json", "fields": {"name": "clients.name"}}
    body = completed(
        [{"namespace": "postgres://warehouse", "name": "reports.names", "facets": {"columnLineage": facet}}]
    )
    with pytest.raises(InvalidInput, match=r"outputs\[0\]\.facets\.columnLineage\.fields\.name"):
        parse(json.dumps(body).encode())


def test_a_column_lineage_facet_naming_more_input_fields_than_are_kept_is_refused():
    inputs = [("postgres://crm", "crm.public.clients", f"c{i}") for i in range(MAX_FIELD_DEPENDENCIES + 1)]
    body = completed([written_with_columns("reports.wide", {"everything": inputs})])

    with pytest.raises(InvalidInput, match=r"outputs\[0\]\.facets\.columnLineage names 10,001 input fields"):
        parse(json.dumps(body).encode())


def test_a_column_named_none_is_kept_apart_from_what_every_column_depends_on(catalog: Catalog, lake: Lake):
    crm = ("postgres://crm", "crm.public.clients", "id")
    wrote = written_with_columns("reports.odd", {"None": [crm]})
    wrote["facets"]["columnLineage"]["dataset"] = [
        {
            "namespace": crm[0],
            "name": crm[1],
            "field": crm[2],
            "transformations": [{"type": "DIRECT", "subtype": "IDENTITY"}],
        }
    ]
    [received] = receive(catalog, lake, parse(json.dumps(completed([wrote])).encode()), "bot")

    assert received.unjoined is None
    with catalog.session() as session:
        kept = session.exec(select(ForeignColumn.output_column)).all()
    assert len(kept) == 2 and set(kept) == {None, "None"}


def test_a_run_facet_that_happens_to_be_called_column_lineage_is_not_held_to_the_dataset_facet_s_schema():
    body = completed([])
    body["run"]["facets"] = {
        "columnLineage": {"_producer": PRODUCER, "_schemaURL": "https://example.com/own.json", "enabled": True}
    }

    [parsed] = parse(json.dumps(body).encode())

    assert parsed.run_facets["columnLineage"]["enabled"] is True


def test_a_savepoint_the_database_has_already_undone_is_reported_as_the_transaction_lost(catalog: Catalog):
    with (
        pytest.raises(TransactionLost, match="the transaction ended on a database error"),
        catalog.session() as session,
    ):
        db = Sql(session)
        with db.savepoint():
            db.run("ROLLBACK", {})  # as SQLite does itself on a full disk
            raise InvalidInput("the joining failed")


def test_an_event_sent_again_with_its_time_written_otherwise_is_the_same_event(catalog: Catalog, lake: Lake):
    run_id = str(uuid.uuid4())
    times = ["2026-11-27T05:00:00Z", "2026-11-27T05:00:00.000+00:00", "2026-11-27T07:00:00+02:00"]

    received = receive(catalog, lake, [event(run_id, "START", [], ["reports.daily"], time=t) for t in times], "bot")

    assert [each.stored for each in received] == [True, False, False]
    with catalog.session() as session:
        assert session.exec(select(ForeignEvent.event_time)).all() == ["2026-11-27T05:00:00Z"]


def test_a_run_id_another_job_reports_under_is_refused_and_the_first_job_s_run_kept(catalog: Catalog, lake: Lake):
    add_version(catalog, "sales/clients", 1, zone="landing")
    run_id = str(uuid.uuid4())
    reads = [at(lake, "landing/sales/clients/v=1")]
    [first] = receive(catalog, lake, [event(run_id, "START", reads, [], job="reuse.A")], "bot")
    received = receive(
        catalog,
        lake,
        [
            event(run_id, "COMPLETE", [], ["written.by.B"], job="reuse.B"),
            event(run_id, "COMPLETE", reads, [], job="reuse.A"),
        ],
        "bot",
    )

    assert first.stored and [each.to_dict()["received"] for each in received] == ["refused", "stored"]
    assert received[0].refused == (
        f"run {run_id} is a run of job airflow://reports/reuse.A: a run id names one run of one job, "
        "and airflow://reports/reuse.B may not report under it"
    )
    [job] = impact(catalog, VersionRef.parse("sales/clients@1")).root.foreign
    assert (job.job, job.state, job.outputs) == ("airflow://reports/reuse.A", "COMPLETE", [])


def test_an_event_that_fails_to_join_leaves_the_others_of_its_request_joined(catalog: Catalog, lake: Lake):
    for asset in ("sales/clients", "sales/products"):
        add_version(catalog, asset, 1, zone="landing")

    def judge(user: str | None, asset: str) -> str | None:
        if asset == "sales/products":
            raise InvalidInput(f"no policy to judge a read of {asset}")
        return None

    failing = event(str(uuid.uuid4()), "START", [at(lake, "landing/sales/products/v=1")], [])
    joining = event(str(uuid.uuid4()), "START", [at(lake, "landing/sales/clients/v=1")], [])
    received = receive(catalog, lake, [failing, joining], "bot", judge)

    assert [(each.stored, each.unjoined) for each in received] == [
        (True, "no policy to judge a read of sales/products"),
        (True, None),
    ]
    assert received[1].inputs[0]["version"] == "sales/clients@1"


@pytest.mark.parametrize("version", ["18446744073709551616", "2147483648", "²", "١", "0", "1.0", " 1"])
def test_a_version_facet_that_names_no_version_refuses_its_event_alone(catalog: Catalog, lake: Lake, version):
    add_version(catalog, "sales/clients", 1, zone="landing")
    folder = dataset("file", at(lake, "landing/sales/clients"), version)
    bad = event(str(uuid.uuid4()), "START", [], [], read=[folder])
    good = event(str(uuid.uuid4()), "START", [], [], read=[dataset("file", at(lake, "landing/sales/clients"), "1")])

    refused, joined = receive(catalog, lake, [bad, good], "bot")

    assert refused.refused is not None and refused.refused.startswith(f"inputs[0]: the version facet '{version}'")
    assert "names no version: a version is numbered in decimal digits, from 1 to 2147483647" in refused.refused
    assert joined.inputs[0]["version"] == "sales/clients@1"
    with catalog.session() as session:
        assert session.exec(select(ForeignEvent.run_id)).all() == [good.run_id]


@pytest.mark.parametrize("version", ["²", "-5", "9223372036854775808", "custody-v0", "custody-v١"])
def test_a_snapshot_facet_that_names_no_snapshot_refuses_its_event_alone(catalog: Catalog, lake: Lake, version):
    table = dataset("trino://trino.example:8080", "custody.sales.clients", version)

    [refused] = receive(catalog, lake, [event(str(uuid.uuid4()), "START", [], [], read=[table])], "bot")

    assert refused.refused is not None and "names no snapshot" in refused.refused


@pytest.mark.parametrize(
    "namespace", ["file://otherhost", "hdfs://namenode:8020", "gs://bucket", "abfss://c@account.dfs.core.windows.net"]
)
def test_a_lake_path_of_another_datasource_is_not_joined_to_the_lake(catalog: Catalog, lake: Lake, namespace):
    add_version(catalog, "sales/clients", 1, zone="landing")
    read = [dataset(namespace, at(lake, "landing/sales/clients/v=1"))]

    [received] = receive(catalog, lake, [event(str(uuid.uuid4()), "START", [], [], read=read)], "bot")

    assert received.inputs == [{"namespace": namespace, "name": at(lake, "landing/sales/clients/v=1")}]


@pytest.mark.parametrize("namespace", ["file", "file://", "file://localhost"])
def test_a_lake_path_of_the_local_file_system_is_joined(catalog: Catalog, lake: Lake, namespace):
    add_version(catalog, "sales/clients", 1, zone="landing")
    read = [dataset(namespace, at(lake, "landing/sales/clients/v=1"))]

    [received] = receive(catalog, lake, [event(str(uuid.uuid4()), "START", [], [], read=read)], "bot")

    assert received.inputs[0]["version"] == "sales/clients@1"


def test_a_read_of_an_asset_s_folder_naming_no_version_is_a_read_of_each_version_it_holds(catalog: Catalog, lake: Lake):
    for number in (1, 2, 3):
        add_version(catalog, "sales/clients", number, zone="landing")
    with catalog.session() as session:
        purged = session.exec(select(VersionRow).where(VersionRow.number == 3)).one()
        purged.status = VersionStatus.PURGED.value
        session.add(purged)
    read = [dataset("file", at(lake, "landing/sales/clients"))]
    outside: list[str] = []

    def judge(user: str | None, asset: str) -> str | None:
        outside.append(asset)
        return f"{user} holds no role on {asset}"

    [received] = receive(catalog, lake, [event(str(uuid.uuid4()), "START", [], [], read=read)], "bot", judge)

    assert [found["version"] for found in received.inputs] == ["sales/clients@1", "sales/clients@2"]
    assert outside == ["sales/clients", "sales/clients"]
    for ref in ("sales/clients@1", "sales/clients@2"):
        assert [job.state for job in impact(catalog, VersionRef.parse(ref)).root.foreign] == ["START"]
    assert impact(catalog, VersionRef.parse("sales/clients@3")).root.foreign == []


def test_runs_whose_ids_begin_alike_are_printed_by_as_much_as_tells_them_apart(catalog: Catalog, lake: Lake):
    from rich.console import Console

    from governance.render import lineage_tree

    add_version(catalog, "sales/clients", 1, zone="landing")
    reads = [at(lake, "landing/sales/clients/v=1")]
    runs = ["01a23381-1c00-7000-8000-000000000001", "01a23381-2c00-7000-8000-000000000002"]
    receive(catalog, lake, [event(run_id, "START", reads, []) for run_id in runs], "bot")

    console = Console(width=200, record=True)
    console.print(lineage_tree(impact(catalog, VersionRef.parse("sales/clients@1")), every_run=True))
    printed = console.export_text()

    assert "run 01a23381-1 " in printed and "run 01a23381-2 " in printed


def test_the_ledger_takes_the_beginning_of_a_run_s_id_that_names_one_run_alone(catalog: Catalog):
    from governance import ledger
    from governance.catalog.ledgerfilter import LedgerFilter

    runs = ["01a23381-1c00-7000-8000-000000000001", "01a23381-2c00-7000-8000-000000000002"]
    with catalog.session() as session:
        for run_id in runs:
            ledger.append(session, actor="bob", action="ingestion.started", run_id=run_id)
    with catalog.reading() as session:
        [found] = ledger.entries(session, LedgerFilter.asked(run_id="01a23381-1"))
        assert found.run_id == runs[0]
        with pytest.raises(InvalidInput, match="01a23381 is the beginning of several runs' ids"):
            ledger.entries(session, LedgerFilter.asked(run_id="01a23381"))
        with pytest.raises(InvalidInput, match="give at least 8 characters"):
            ledger.entries_json(session, LedgerFilter.asked(run_id="01a2"))


def registered(catalog: Catalog, asset: str, zone: str) -> None:
    """The asset known to the catalog in `zone`, with no version yet."""
    from datetime import UTC, datetime

    from governance.catalog.models import AssetRow

    domain, name = asset.split("/")
    with catalog.session() as session:
        session.add(
            AssetRow(
                key=asset,
                domain=domain,
                name=name,
                zone=zone,
                spec_hash="s1",
                spec_json="{}",
                updated_at=datetime.now(UTC),
            )
        )


def test_a_read_naming_a_version_not_committed_yet_waits_for_it_and_joins_once_it_is(catalog: Catalog, lake: Lake):
    from governance.foreign.waiting import Waiting, join_waiting, still_waiting

    registered(catalog, "sales/names_and_products", "integration")
    read = [dataset("file", at(lake, "integration/sales/names_and_products"), "3")]
    run_id = str(uuid.uuid4())
    judged: list[tuple[str | None, str]] = []

    def judge(user: str | None, asset: str) -> str | None:
        judged.append((user, asset))
        return "no role"

    [received] = receive(catalog, lake, [event(run_id, "START", [], [], read=read)], "bot", judge)
    assert received.inputs[0]["waiting for"] == "sales/names_and_products@3"
    assert still_waiting(catalog) == [Waiting("sales/names_and_products@3", 1)]
    assert join_waiting(catalog, judge) == [] and judged == []

    add_version(catalog, "sales/names_and_products", 3)
    [joined] = join_waiting(catalog, judge)

    assert (joined.run_id, joined.ref) == (run_id, "sales/names_and_products@3")
    assert judged == [(None, "sales/names_and_products")]
    assert [job.run_id for job in impact(catalog, VersionRef.parse("sales/names_and_products@3")).root.foreign] == [
        run_id
    ]
    with catalog.reading() as session:
        [entry] = session.exec(select(LedgerEntry).where(LedgerEntry.action == "read.outside-policy")).all()
    assert (entry.asset_key, entry.version, entry.run_id) == ("sales/names_and_products", 3, run_id)
    assert join_waiting(catalog, judge) == [] and still_waiting(catalog) == []


def test_a_read_of_a_version_s_folder_not_committed_yet_waits_for_that_version(catalog: Catalog, lake: Lake):
    registered(catalog, "sales/clients", "landing")
    read = [dataset("file", at(lake, "landing/sales/clients/v=2/part-0.parquet"))]

    [received] = receive(catalog, lake, [event(str(uuid.uuid4()), "START", [], [], read=read)], "bot")

    assert received.inputs[0]["waiting for"] == "sales/clients@2"


@pytest.mark.parametrize(
    "location",
    ["landing/sales/nothing/v=1", "integration/sales/clients/v=1", "landing/sales/clients/v=0"],
    ids=["unknown asset", "other zone", "no version number"],
)
def test_a_read_in_the_lake_that_no_version_of_a_known_asset_can_be_is_a_problem_not_a_wait(
    catalog: Catalog, lake: Lake, location: str
):
    registered(catalog, "sales/clients", "landing")
    read = [dataset("file", at(lake, location))]

    [received] = receive(catalog, lake, [event(str(uuid.uuid4()), "START", [], [], read=read)], "bot")

    assert received.inputs[0]["problem"] == f"in the lake at {location}, where the catalog has no version"


def test_runs_recorded_before_their_parent_and_error_were_kept_get_them_from_their_events_when_opened(
    catalog: Catalog, lake: Lake, catalog_url: str
):
    from sqlalchemy import text

    from governance.catalog.engine import make_engine
    from governance.foreign.history import job_runs

    run_id, parent = str(uuid.uuid4()), str(uuid.uuid4())
    failed = event(run_id, "FAIL", [], [], time="2026-11-27T05:01:00Z")
    body = {
        **failed.body,
        "run": {
            "runId": run_id,
            "facets": {
                "parent": {
                    **facet("ParentRunFacet"),
                    "run": {"runId": parent},
                    "job": {"namespace": "airflow://reports", "name": "dag"},
                },
                "errorMessage": {**facet("ErrorMessageRunFacet"), "message": "boom", "programmingLanguage": "python"},
            },
        },
    }
    [failed] = parse(json.dumps(body).encode())
    receive(catalog, lake, [failed], "bot")
    with catalog.session() as session:  # as a catalog from before they were kept
        session.connection().execute(
            text("UPDATE foreign_run SET job_ident = NULL, error = NULL, parent_run_id = NULL, parent_job_name = NULL")
        )
        session.connection().execute(text("DELETE FROM catalog_migration WHERE name = 'foreign-runs-told'"))

    make_engine(catalog_url).dispose()

    with catalog.reading() as session:
        [run] = job_runs(session, "airflow://reports", f"job-{run_id[:8]}")
    assert (run["error"], run["parent"]) == (
        "boom",
        {"run_id": parent, "job_namespace": "airflow://reports", "job_name": "dag"},
    )


def facet(name: str) -> dict[str, str]:
    """What every facet says of itself: who produced it and its schema."""
    return {"_producer": PRODUCER, "_schemaURL": f"https://openlineage.io/spec/facets/1-0-0/{name}.json#/$defs/{name}"}


def test_a_parent_facet_whose_names_hold_control_characters_or_whose_run_is_no_uuid_names_no_parent(
    catalog: Catalog, lake: Lake
):
    from governance.foreign.history import job_runs

    parents = [
        {"run": {"runId": str(uuid.uuid4())}, "job": {"namespace": "airflow://reports", "name": "dag\x1b[2J"}},
        {"run": {"runId": "not-a-uuid"}, "job": {"namespace": "airflow://reports", "name": "dag"}},
    ]
    for parent in parents:
        run_id = str(uuid.uuid4())
        plain = event(run_id, "START", [], [], job="orphan")
        own = {**facet("MyParentRunFacet"), **parent}  # a producer's own schema: held to no schema here
        [started] = parse(json.dumps({**plain.body, "run": {"runId": run_id, "facets": {"parent": own}}}).encode())
        receive(catalog, lake, [started], "bot")

    with catalog.reading() as session:
        assert [run["parent"] for run in job_runs(session, "airflow://reports", "orphan")] == [None, None]


def test_a_run_naming_a_version_two_ways_before_it_is_committed_is_one_read_outside_policy_once_it_is(
    catalog: Catalog, lake: Lake
):
    from governance.foreign.waiting import join_waiting

    registered(catalog, "sales/clients", "landing")
    reads = [
        dataset("file", at(lake, "landing/sales/clients"), "2"),
        dataset("file", at(lake, "landing/sales/clients/v=2")),
    ]
    receive(catalog, lake, [event(str(uuid.uuid4()), "START", [], [], read=reads)], "bot")
    add_version(catalog, "sales/clients", 2, zone="landing")

    joined = join_waiting(catalog, lambda user, asset: "no role")

    with catalog.reading() as session:
        flagged = session.exec(select(LedgerEntry).where(LedgerEntry.action == "read.outside-policy")).all()
    assert (len(joined), len(flagged)) == (2, 1)
