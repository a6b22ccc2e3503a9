"""Lineage from tools Custody does not run: OpenLineage run events posted to `custody serve` by a
service account of the lineage group, with openlineage-python's own HTTP transport, kept as received,
joined to the Custody versions they read, and shown in `custody impact`.

One home, with sales/clients@1 and sales/products@1 ingested by bob, and one `custody serve` on it
serve every test."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attr
import pytest
import requests
from openlineage.client import OpenLineageClient
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import (
    RunFacet,
    dataset_version_dataset,
    error_message_run,
    parent_run,
    processing_engine_run,
    symlinks_dataset,
)
from openlineage.client.facet_v2 import column_lineage_dataset as cl
from openlineage.client.transport.http import ApiKeyTokenProvider, HttpConfig, HttpTransport
from sqlmodel import col, func, select

from governance.catalog import Catalog
from governance.catalog.engine import make_engine
from governance.catalog.models import ForeignEvent, ForeignRun, LedgerEntry, SourceFile, VersionRow
from governance.config import Settings
from governance.demo import drop_demo_batches
from governance.foreign.events import instant
from governance.lake import open_lake
from governance.runs import os_user
from governance.zones import Lake, VersionRef
from tests.conftest import plain_environ
from tests.dagster_servers import start_service, stop, token
from tests.helpers import recorded, run_proven

pytestmark = pytest.mark.xdist_group("foreign-lineage")
PRODUCER = "https://github.com/apache/airflow/tree/providers-openlineage/2.6.0"
AIRFLOW = "airflow://scheduler.example"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, spark) -> Path:
    """sales/clients@1 and sales/products@1, ingested by bob."""
    home = tmp_path_factory.mktemp("foreign-lineage") / "home"
    with pytest.MonkeyPatch.context() as monkeypatch:
        for name, value in plain_environ(home).items():
            monkeypatch.setenv(name, value)
        drop_demo_batches(Lake(Settings.from_env().lake))
        for asset in ("sales/products", "sales/clients"):
            assert run_proven(["ingest", asset, "--as", "bob"]) == 0
    return home


@pytest.fixture(scope="module")
def api(home: Path) -> Iterator[str]:
    server, port = start_service(Settings.under(home), plain_environ(home), ui=False)
    yield f"http://127.0.0.1:{port}/api/v1"
    stop(server)


@pytest.fixture(scope="module")
def catalog(home: Path) -> Catalog:
    return Catalog(make_engine(Settings.under(home).catalog_url))


@pytest.fixture(scope="module")
def reporter(api: str) -> dict[str, str]:
    return token(api, "lineage-bot")


@pytest.fixture(scope="module")
def openlineage(api: str, reporter: dict[str, str]) -> OpenLineageClient:
    """openlineage-python's client, its HTTP transport pointed at the service with the service account's token."""
    key = reporter["Authorization"].removeprefix("Bearer ")
    config = HttpConfig(
        url=api.removesuffix("/api/v1"), endpoint="api/v1/lineage", auth=ApiKeyTokenProvider({"apiKey": key})
    )
    return OpenLineageClient(transport=HttpTransport(config))


@attr.define
class AirflowRunFacet(RunFacet):
    """What Airflow's provider says of the task instance: the DAG and the task, with their owners."""

    dag: dict = attr.field(factory=dict)
    task: dict = attr.field(factory=dict)

    @staticmethod
    def _get_schema() -> str:
        return "https://raw.githubusercontent.com/apache/airflow/providers-openlineage/2.6.0/airflow/providers/openlineage/facets/AirflowRunFacet.json#/$defs/AirflowRunFacet"


def version_path(home: Path, asset: str, number: int) -> str:
    """A version's folder, as a Spark job reading it names it."""
    catalog = Catalog(make_engine(Settings.under(home).catalog_url))
    with catalog.session() as session:
        row = session.exec(select(VersionRow).where(VersionRow.asset_key == asset, VersionRow.number == number)).one()
    return str(Settings.under(home).lake.resolve() / row.path)


def airflow_events(
    inputs: list[InputDataset],
    outputs: list[OutputDataset],
    task: str,
    owner: str = "carol",
    end: RunState = RunState.COMPLETE,
    dag_run: str | None = None,
    error: str | None = None,
) -> list[RunEvent]:
    """A task's START and its end, as Airflow's OpenLineage provider sends them: with `dag_run`,
    naming the DAG's run as its parent; with `error`, its end saying so."""
    run_id = str(uuid.uuid4())
    began = datetime.now(UTC)
    facets: dict[str, RunFacet] = {
        "airflow": AirflowRunFacet(
            dag={"dag_id": "reports", "owner": "data-eng"}, task={"task_id": task, "owner": owner}
        ),
        "processing_engine": processing_engine_run.ProcessingEngineRunFacet(version="3.1.0", name="Airflow"),
    }
    if dag_run is not None:
        facets["parent"] = parent_run.ParentRunFacet.create(dag_run, AIRFLOW, "reports")
    failed = {"errorMessage": error_message_run.ErrorMessageRunFacet(error, "python")} if error else {}
    job = Job(namespace=AIRFLOW, name=f"reports.{task}")
    return [
        RunEvent(
            eventType=state,
            eventTime=(began + timedelta(seconds=seconds)).isoformat(),
            run=Run(runId=run_id, facets={**facets, **(failed if state == end else {})}),
            job=job,
            producer=PRODUCER,
            inputs=inputs,
            outputs=outputs,
        )
        for state, seconds in ((RunState.START, 0), (end, 3))
    ]


def custody(home: Path, capsys, *args: str) -> str:
    """`custody ARGS` in process on the module's home, on a wide console: what it printed."""
    from governance.cli import app

    with pytest.MonkeyPatch.context() as monkeypatch:
        for name, value in {**plain_environ(home), "COLUMNS": "200"}.items():
            monkeypatch.setenv(name, value)
        capsys.readouterr()
        app(list(args), standalone_mode=False)
    return capsys.readouterr().out


def impact(home: Path, ref: str, capsys) -> dict:
    return json.loads(custody(home, capsys, "impact", ref, "--json"))


def post(api: str, headers: dict[str, str], body: object) -> requests.Response:
    return requests.post(f"{api}/lineage", json=body, headers=headers, timeout=60)


JSON = "application/json"


def post_text(api: str, headers: dict[str, str], text: str, content_type: str | None) -> requests.Response:
    """`text` posted as it is, saying it is `content_type` (None: saying nothing)."""
    said = {"Content-Type": content_type} if content_type is not None else {}
    return requests.post(f"{api}/lineage", data=text.encode(), headers={**headers, **said}, timeout=60)


def event_dict(event: RunEvent) -> dict:
    from openlineage.client.serde import Serde

    return json.loads(Serde.to_json(event))


def stored_events(catalog: Catalog, run_id: str) -> list[str]:
    with catalog.session() as session:
        return sorted(session.exec(select(ForeignEvent.event_type).where(ForeignEvent.run_id == run_id)).all())


def test_an_airflow_task_s_events_join_the_versions_it_read_and_show_in_their_impact(
    home, openlineage, catalog, capsys
):
    clients = InputDataset("file", version_path(home, "sales/clients", 1))
    # Custody's own events name an asset by its folder, the version in the version facet.
    products = InputDataset(
        "file",
        str(Settings.under(home).lake.resolve() / "landing/sales/products"),
        facets={"version": dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion="1")},
    )
    report = OutputDataset("postgres://warehouse:5432", "reports.public.client_products")
    events = airflow_events([clients, products], [report], "build_report")
    for event in events:
        openlineage.emit(event)

    run_id = events[0].run.runId
    assert stored_events(catalog, run_id) == ["COMPLETE", "START"]
    for ref in ("sales/clients@1", "sales/products@1"):
        [job] = impact(home, ref, capsys)["foreign_jobs"]
        assert (job["run_id"], job["job_name"], job["state"], job["user"]) == (
            run_id,
            "reports.build_report",
            "COMPLETE",
            "carol",
        )
        assert job["reporter"] == "lineage-bot"
        assert [(o["namespace"], o["name"]) for o in job["outputs"]] == [
            ("postgres://warehouse:5432", "reports.public.client_products")
        ]


def test_impact_follows_foreign_jobs_through_the_datasets_they_wrote(home, openlineage, capsys):
    table = OutputDataset("postgres://warehouse:5432", "staging.public.clients_copy")
    first = airflow_events(
        [InputDataset("file", version_path(home, "sales/clients", 1) + "/part-0.parquet")], [table], "copy"
    )
    second = airflow_events(
        [InputDataset(table.namespace, table.name)], [OutputDataset("s3://exports", "clients.csv")], "export"
    )
    for event in [*first, *second]:
        openlineage.emit(event)

    jobs = {job["job_name"]: job for job in impact(home, "sales/clients@1", capsys)["foreign_jobs"]}
    [copied] = jobs["reports.copy"]["outputs"]
    assert copied["name"] == "staging.public.clients_copy"
    [export] = copied["read_by"]
    assert export["job_name"] == "reports.export" and export["depth"] == 1
    assert [o["name"] for o in export["outputs"]] == ["clients.csv"]


def test_the_impact_tree_draws_foreign_jobs_in_their_own_style(home, openlineage, capsys):
    events = airflow_events([InputDataset("file", version_path(home, "sales/products", 1))], [], "count_products")
    for event in events:
        openlineage.emit(event)
    out = custody(home, capsys, "impact", "sales/products@1")
    assert f"job {AIRFLOW}/reports.count_products" in out
    assert "not run by Custody" in out and "user carol" in out and "reported by lineage-bot" in out


def test_impact_through_the_service_carries_the_foreign_jobs(api, openlineage, home):
    events = airflow_events([InputDataset("file", version_path(home, "sales/products", 1))], [], "audit_products")
    for event in events:
        openlineage.emit(event)
    found = requests.get(f"{api}/versions/sales/products/1/impact", headers=token(api, "carol"), timeout=60).json()
    assert events[0].run.runId in {job["run_id"] for job in found["foreign_jobs"]}


def test_re_sent_and_out_of_order_events_are_kept_once_and_the_run_ends_complete(api, reporter, catalog, home):
    start, complete = (
        event_dict(e)
        for e in airflow_events([InputDataset("file", version_path(home, "sales/clients", 1))], [], "late")
    )
    first = post(api, reporter, complete)
    assert first.status_code == 200, first.text
    assert post(api, reporter, [start, complete]).json()["received"][1]["received"] == "already stored"
    assert post(api, reporter, start).json()["received"][0]["received"] == "already stored"

    run_id = start["run"]["runId"]
    assert stored_events(catalog, run_id) == ["COMPLETE", "START"]
    with catalog.session() as session:
        run = session.get(ForeignRun, run_id)
    assert run is not None and run.state == "COMPLETE" and run.started_at == instant(start["eventTime"])


def test_an_input_in_the_lake_where_no_version_can_be_is_reported_and_one_outside_the_lake_is_not(api, reporter, home):
    lake = Settings.under(home).lake.resolve()
    missing = InputDataset("file", str(lake / "landing/sales/nothing/v=1"))
    elsewhere = InputDataset("postgres://crm:5432", "crm.public.clients")
    [start, _] = (event_dict(e) for e in airflow_events([missing, elsewhere], [], "stray"))
    [received] = post(api, reporter, start).json()["received"]
    assert received["received"] == "stored"
    assert received["inputs"] == [
        {
            "namespace": "file",
            "name": str(lake / "landing/sales/nothing/v=1"),
            "problem": "in the lake at landing/sales/nothing/v=1, where the catalog has no version",
        },
        {"namespace": "postgres://crm:5432", "name": "crm.public.clients"},
    ]


def test_a_version_number_past_what_the_catalog_keeps_refuses_its_event_with_422_and_keeps_the_others(
    api, reporter, home, catalog
):
    past = str(2**63)
    folder = str(Settings.under(home).lake.resolve() / "landing/sales/clients")
    [far, _] = (event_dict(e) for e in airflow_events([versioned("file", folder, past)], [], "far"))
    [near, _] = (event_dict(e) for e in airflow_events([versioned("file", folder, "1")], [], "near"))

    answer = post(api, reporter, [far, near])

    assert answer.status_code == 422
    refused, kept = answer.json()["received"]
    assert refused["received"] == "refused"
    assert refused["reason"].startswith(f"inputs[0]: the version facet '{past}' of {folder} names no version")
    assert (kept["received"], kept["inputs"][0]["version"]) == ("stored", "sales/clients@1")
    assert stored_events(catalog, far["run"]["runId"]) == []


def test_a_run_id_another_job_reports_under_is_refused_with_422_naming_the_job(api, reporter, catalog):
    [start, _] = (event_dict(e) for e in airflow_events([], [], "reuse_a"))
    [other, _] = (event_dict(e) for e in airflow_events([], [], "reuse_b"))
    other["run"]["runId"] = start["run"]["runId"]

    answer = post(api, reporter, [start, other])

    assert answer.status_code == 422
    assert [each["received"] for each in answer.json()["received"]] == ["stored", "refused"]
    assert f"is a run of job {AIRFLOW}/reports.reuse_a" in answer.json()["received"][1]["reason"]
    assert stored_events(catalog, start["run"]["runId"]) == ["START"]


def test_names_that_look_like_sql_or_a_way_out_of_the_lake_are_kept_as_they_are_and_join_nothing(
    api, reporter, home, catalog
):
    lake = Settings.under(home).lake.resolve()
    hostile = [
        InputDataset("file", f"{lake}/../../etc/passwd"),
        InputDataset("x'; DROP TABLE version; --", 'a" OR 1=1 --'),
    ]
    [start, _] = (event_dict(e) for e in airflow_events(hostile, [], "hostile"))
    [received] = post(api, reporter, start).json()["received"]
    assert [i.get("version") for i in received["inputs"]] == [None, None]
    with catalog.session() as session:
        assert session.exec(select(func.count()).select_from(VersionRow)).one() >= 2
        body = session.exec(select(ForeignEvent.body).where(ForeignEvent.run_id == start["run"]["runId"])).one()
    assert json.loads(body)["inputs"][1]["namespace"] == "x'; DROP TABLE version; --"


def test_a_post_without_a_token_or_with_a_foreign_signed_one_gets_401_and_is_recorded(api, home, catalog):
    [start, _] = (event_dict(e) for e in airflow_events([], [], "anonymous"))
    forged = {"Authorization": "Bearer not-a-token-of-this-service"}
    for headers in ({}, forged):
        answer = post(api, headers, start)
        assert answer.status_code == 401, answer.text
    with catalog.session() as session:
        refused = session.exec(
            select(LedgerEntry).where(
                LedgerEntry.action == "session", col(LedgerEntry.details).contains("/api/v1/lineage")
            )
        ).all()
    assert refused and all(json.loads(entry.details)["result"] == "denied" for entry in refused)
    assert stored_events(catalog, start["run"]["runId"]) == []


def test_a_user_outside_the_lineage_group_is_refused_and_recorded(api, catalog):
    [start, _] = (event_dict(e) for e in airflow_events([], [], "by-carol"))
    answer = post(api, token(api, "carol"), start)
    assert answer.status_code == 403
    assert answer.json()["detail"] == "carol may not report lineage: it needs the lineage group (lineage-reporters)"
    with catalog.session() as session:
        [entry] = session.exec(
            select(LedgerEntry).where(LedgerEntry.action == "lineage.report", LedgerEntry.actor == "carol")
        ).all()
    assert json.loads(entry.details)["result"] == "denied"
    assert stored_events(catalog, start["run"]["runId"]) == []


def test_a_client_s_later_requests_are_answered_as_its_first(api, catalog):
    # The first request of a token reads its session from the catalog; the later ones are taken on
    # the endpoint's express path, past FastAPI's routing, and must be answered the same.
    [start, _] = (event_dict(e) for e in airflow_events([], [], "again-and-again"))
    bot, carol = token(api, "lineage-bot"), token(api, "carol")
    answers = [post(api, bot, start) for _ in range(2)]
    invalid = [post_text(api, bot, "not json", JSON) for _ in range(2)]
    refused = [post(api, carol, start) for _ in range(2)]

    assert [answer.json()["received"][0]["received"] for answer in answers] == ["stored", "already stored"]
    assert [(answer.status_code, answer.json()["detail"]) for answer in invalid] == [
        (400, "the body is not JSON: Expecting value: line 1 column 1 (char 0)")
    ] * 2
    assert [answer.status_code for answer in refused] == [403, 403]
    assert refused[0].json() == refused[1].json()
    assert stored_events(catalog, start["run"]["runId"]) == ["START"]


def test_bad_events_get_one_clear_message_and_nothing_is_stored(api, reporter, catalog):
    [start, _] = (event_dict(e) for e in airflow_events([], [], "bad"))
    hostile_facet = {**start["run"]["facets"]["processing_engine"], "_schemaURL": "file:///etc/passwd"}
    cases = [
        ("not json", None, "the body is not JSON"),
        (None, {**start, "run": {"runId": "not-a-uuid"}}, "the event: run.runId: 'not-a-uuid' is not a 'uuid'"),
        (None, {**start, "eventTime": "yesterday"}, "the event: eventTime: 'yesterday' is not a 'date-time'"),
        (
            None,
            {**start, "run": {**start["run"], "facets": {"processing_engine": hostile_facet}}},
            "the event: run.facets.processing_engine._schemaURL 'file:///etc/passwd' is not an http(s) URL",
        ),
        (
            None,
            {**start, "job": {"namespace": "ns", "name": "a\nb"}},
            "the event: job.name 'a\\nb' holds a control character",
        ),
        (None, {"dataset": {"namespace": "ns", "name": "t"}}, "the event: 'eventTime' is a required property"),
        (None, {"eventTime": start["eventTime"]}, "the event is no OpenLineage event: it has no run, no job and no"),
        (None, [start, {**start, "producer": 7}], "event 1 of the list: producer: 7 is not of type 'string'"),
    ]
    for text, body, said in cases:
        answer = post_text(api, reporter, text, JSON) if text is not None else post(api, reporter, body)
        assert answer.status_code == 400, answer.text
        assert answer.json()["detail"].startswith(said), answer.json()
    assert stored_events(catalog, start["run"]["runId"]) == []


def test_events_are_taken_as_json_alone_as_the_http_transports_send_them(api, reporter, catalog):
    [start, _] = (event_dict(e) for e in airflow_events([], [], "typed"))
    text = json.dumps(start)
    for content_type, said in (
        ("text/plain", "Content-Type 'text/plain' is refused: the API takes JSON, sent as application/json"),
        ("application/x-www-form-urlencoded", "Content-Type 'application/x-www-form-urlencoded' is refused"),
        (None, "a body of no Content-Type is refused: the API takes JSON, sent as application/json"),
    ):
        answer = post_text(api, reporter, text, content_type)
        assert answer.status_code == 415 and answer.json()["detail"].startswith(said), answer.text
    assert stored_events(catalog, start["run"]["runId"]) == []
    # Spark's listener (OpenLineage's Java client) names the charset.
    assert post_text(api, reporter, text, "application/json; charset=UTF-8").status_code == 200
    assert stored_events(catalog, start["run"]["runId"]) == ["START"]


def test_an_oversized_body_or_one_that_inflates_past_the_limit_is_refused(api, reporter):
    big = json.dumps({"padding": "x" * (5 * 1024 * 1024)}).encode()
    answer = requests.post(
        f"{api}/lineage", data=big, headers={**reporter, "Content-Type": "application/json"}, timeout=60
    )
    assert answer.status_code == 413
    bomb = gzip.compress(b"[" + b" " * (64 * 1024 * 1024) + b"]")
    answer = requests.post(
        f"{api}/lineage",
        data=bomb,
        headers={**reporter, "Content-Encoding": "gzip", "Content-Type": "application/json"},
        timeout=60,
    )
    assert answer.status_code == 400
    assert "inflated, are larger than the 4 MiB" in answer.json()["detail"]


def test_gzip_compressed_events_as_the_http_transport_sends_them_are_accepted(api, reporter, catalog):
    [start, _] = (event_dict(e) for e in airflow_events([], [], "compressed"))
    answer = requests.post(
        f"{api}/lineage",
        data=gzip.compress(json.dumps(start).encode()),
        headers={**reporter, "Content-Encoding": "gzip", "Content-Type": "application/json"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    assert stored_events(catalog, start["run"]["runId"]) == ["START"]


def flagged(catalog: Catalog, actor: str) -> list[LedgerEntry]:
    with catalog.session() as session:
        return list(
            session.exec(
                select(LedgerEntry).where(LedgerEntry.action == "read.outside-policy", LedgerEntry.actor == actor)
            )
        )


def outside_policy(catalog: Catalog, run_id: str) -> list[LedgerEntry]:
    with catalog.session() as session:
        return list(
            session.exec(
                select(LedgerEntry).where(LedgerEntry.action == "read.outside-policy", LedgerEntry.run_id == run_id)
            )
        )


def test_a_read_under_a_user_with_no_role_on_the_asset_is_recorded_for_auditors(home, openlineage, catalog, capsys):
    events = airflow_events([InputDataset("file", version_path(home, "sales/clients", 1))], [], "side_job", owner="eve")
    for event in events:
        openlineage.emit(event)

    [entry] = outside_policy(catalog, events[0].run.runId)  # once, though both events name the read
    details = json.loads(entry.details)
    assert (entry.actor, entry.asset_key, entry.version, entry.assurance) == ("eve", "sales/clients", 1, "asserted")
    assert details["reason"].startswith("eve may not read sales/clients: it needs consumer (sales-consumers)")
    assert (details["job"], details["reported_by"], details["channel"]) == (
        f"{AIRFLOW}/reports.side_job",
        "lineage-bot",
        "openlineage",
    )
    listed = recorded(catalog, action="read.outside-policy")
    assert events[0].run.runId in {listed_entry["run_id"] for listed_entry in listed}


def test_a_read_by_a_consumer_of_the_asset_is_not_flagged(home, openlineage, catalog):
    events = airflow_events(
        [InputDataset("file", version_path(home, "sales/clients", 1))], [], "by_consumer", owner="carol"
    )
    for event in events:
        openlineage.emit(event)
    assert outside_policy(catalog, events[0].run.runId) == []


def test_a_read_whose_run_reports_no_user_is_recorded_as_unknown(api, reporter, home, catalog):
    [start, _] = (
        event_dict(e)
        for e in airflow_events([InputDataset("file", version_path(home, "sales/products", 1))], [], "nobody")
    )
    start["run"]["facets"] = {}
    assert post(api, reporter, start).status_code == 200
    [entry] = outside_policy(catalog, start["run"]["runId"])
    assert (entry.actor, entry.assurance, json.loads(entry.details)["reason"]) == (
        "unknown",
        "none",
        "the run reported no user",
    )


def test_event_times_in_nanoseconds_as_java_clients_send_them_order_a_run(api, reporter, catalog):
    start, complete = (event_dict(e) for e in airflow_events([], [], "nanos"))
    start["eventTime"], complete["eventTime"] = "2026-11-27T05:00:00.123456789Z", "2026-11-27T05:00:01.987654321Z"
    running = {**start, "eventType": "RUNNING", "eventTime": "2026-11-27T05:00:00.5Z"}
    for event in (start, complete, running):
        assert post(api, reporter, event).status_code == 200
    with catalog.session() as session:
        run = session.get(ForeignRun, start["run"]["runId"])
    # Kept as one instant is written, to the microsecond Python's times hold.
    assert run is not None and (run.state, run.state_time) == ("COMPLETE", "2026-11-27T05:00:01.987654Z")


OPENLINEAGE_JARS = Path(sys.prefix) / "share" / "custody" / "openlineage-jars"
# A plain PySpark job, not built from a spec: clients joined to products, written as a table, with
# OpenLineage's Spark listener posting what it read and wrote to the service.
REPORT_JOB = """
import sys
from pyspark.sql import SparkSession

jar, out, clients_path, products_path, url, key = sys.argv[1:]
spark = (
    SparkSession.builder.master("local[1]").appName("client_report")
    .config("spark.jars", jar)
    .config("spark.extraListeners", "io.openlineage.spark.agent.OpenLineageSparkListener")
    .config("spark.openlineage.namespace", "spark://reports")
    .config("spark.openlineage.transport.type", "http")
    .config("spark.openlineage.transport.url", url)
    .config("spark.openlineage.transport.endpoint", "/api/v1/lineage")
    .config("spark.openlineage.transport.auth.type", "api_key")
    .config("spark.openlineage.transport.auth.apiKey", key)
    .config("spark.ui.enabled", "false")
    .getOrCreate()
)
clients = spark.read.parquet(clients_path)
products = spark.read.parquet(products_path)
report = clients.join(products, clients.order__product_id == products.product_id).select(
    clients.name, products.product_name, (clients.order__quantity * products.unit_price).alias("amount")
)
report.write.mode("overwrite").parquet(out)
spark.stop()
"""


def report_job(api: str, reporter: dict[str, str], tmp_path: Path, clients: str, products: str) -> Path:
    """REPORT_JOB run with OpenLineage's listener, reading `clients` and `products`: where it wrote."""
    [jar] = sorted(OPENLINEAGE_JARS.glob("openlineage-spark_*.jar"))  # `make setup` fetches it
    job = tmp_path / "client_report.py"
    job.write_text(REPORT_JOB)
    out = tmp_path / "warehouse" / "client_report"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUSTODY_", "DAGSTER_", "PYSPARK_SUBMIT"))}
    key = reporter["Authorization"].removeprefix("Bearer ")
    subprocess.run(
        [sys.executable, str(job), str(jar), str(out), clients, products, api.removesuffix("/api/v1"), key],
        env=env,
        check=True,
        timeout=600,
        capture_output=True,
    )
    return out


def test_a_plain_pyspark_job_with_openlineage_s_listener_joins_the_two_versions_it_read(
    api, home, reporter, catalog, tmp_path, capsys
):
    out = report_job(
        api, reporter, tmp_path, version_path(home, "sales/clients", 1), version_path(home, "sales/products", 1)
    )

    for ref in ("sales/clients@1", "sales/products@1"):
        writers = [
            job for job in impact(home, ref, capsys)["foreign_jobs"] if job["job_namespace"] == "spark://reports"
        ]
        report = [o for job in writers for o in job["outputs"] if (o["namespace"], o["name"]) == ("file", str(out))]
        assert report, writers
        amount = [
            (found["version"], found["field"])
            for output in report
            if output["columns"]
            for found in output["columns"]["columns"]["amount"]
            if found["kind"] == "DIRECT"
        ]
        assert set(amount) == {("sales/clients@1", "order__quantity"), ("sales/products@1", "unit_price")}
    # The listener reports the OS user running the job, whom the directory does not know.
    runs = {json.loads(entry.details)["job"] for entry in flagged(catalog, os_user())}
    assert any(job.startswith("spark://reports/") for job in runs)


def test_a_spark_job_reading_an_asset_s_whole_folder_is_joined_to_each_version_it_holds(
    api, home, reporter, tmp_path, capsys
):
    folder = str(Settings.under(home).lake.resolve() / "landing/sales/clients")
    out = report_job(api, reporter, tmp_path, folder, version_path(home, "sales/products", 1))

    writers = [
        job
        for job in impact(home, "sales/clients@1", capsys)["foreign_jobs"]
        if any((o["namespace"], o["name"]) == ("file", str(out)) for o in job["outputs"])
    ]
    assert writers and writers[0]["job_namespace"] == "spark://reports"
    # The listener names the application's run as the parent of each action's: the tree shows them so.
    assert writers[0]["parent_job"] == "spark://reports/client_report"
    printed = custody(home, capsys, "impact", "sales/clients@1")
    assert "job spark://reports/client_report not run by Custody, parent of" in printed


def test_the_impact_graph_draws_foreign_jobs_and_what_they_wrote_in_their_own_style(
    home, openlineage, tmp_path, capsys
):
    table = OutputDataset("postgres://warehouse:5432", "marts.public.product_sales")
    read = [InputDataset("file", version_path(home, "sales/products", 1))]
    runs = [airflow_events(read, [table], "graph_me"), airflow_events(read, [table], "graph_me", end=RunState.FAIL)]
    for event in (event for events in runs for event in events):
        openlineage.emit(event)
    for kind in ("json", "svg"):
        target = str(tmp_path / f"impact.{kind}")
        custody(home, capsys, "lineage", "graph", "sales/products@1", "--impact", "--format", kind, "-o", target)
    custody(
        home, capsys, "lineage", "graph", "sales/products@1", "--impact", "--runs", "-o", str(tmp_path / "runs.json")
    )

    drawn = json.loads((tmp_path / "impact.json").read_text())
    job = f"job:{AIRFLOW}/reports.graph_me"
    dataset = "dataset:postgres://warehouse:5432/marts.public.product_sales@"
    [node] = [node for node in drawn["nodes"] if node["id"] == job]
    assert (node["kind"], node["runs"], node["states"]) == ("foreign_job", 2, "1 COMPLETE, 1 FAIL")
    assert {(edge["source"], edge["target"]) for edge in drawn["edges"]} >= {("sales/products@1", job), (job, dataset)}
    picture = (tmp_path / "impact.svg").read_text()
    assert "reports.graph_me" in picture and "marts.public.product_sales" in picture and "not run by Custody" in picture
    assert "2 runs: 1 COMPLETE, 1 FAIL" in picture
    each = {node["id"] for node in json.loads((tmp_path / "runs.json").read_text())["nodes"]}
    assert {f"job:{events[0].run.runId}" for events in runs} <= each


def test_provenance_shows_the_foreign_job_that_wrote_a_version_s_dropzone_batch_and_what_it_read(
    home, openlineage, capsys
):
    lake = Settings.under(home).lake.resolve()
    [source] = impact(home, "sales/clients@1", capsys)["sources"]
    batch = str(lake / Path(source["path"]).parent)
    crm = InputDataset("postgres://crm:5432", "crm.public.clients")
    products = InputDataset("file", version_path(home, "sales/products", 1))
    events = airflow_events([crm, products], [OutputDataset("file", batch)], "export_clients")
    for event in events:
        openlineage.emit(event)

    writers = json.loads(custody(home, capsys, "provenance", "sales/clients@1", "--json"))["foreign_jobs"]
    [writer] = [w for w in writers if w["job_name"] == "reports.export_clients"]
    tree = custody(home, capsys, "provenance", "sales/clients@1")
    assert (writer["run_id"], writer["job_name"]) == (events[0].run.runId, "reports.export_clients")
    assert [(read["name"], read["custody"]) for read in writer["inputs"]] == [
        (version_path(home, "sales/products", 1), "sales/products@1"),
        ("crm.public.clients", None),
    ]
    assert f"job {AIRFLOW}/reports.export_clients" in tree and "read sales/products@1" in tree


def field_from(dataset: InputDataset, field: str, kind: str = "DIRECT", subtype: str = "IDENTITY") -> cl.InputField:
    return cl.InputField(dataset.namespace, dataset.name, field, [cl.Transformation(type=kind, subtype=subtype)])


@pytest.fixture(scope="module")
def exported(home: Path, openlineage: OpenLineageClient) -> str:
    """An export job that read a CRM table and sales/products@1, kept active clients only, and wrote
    sales/clients@1's DropZone batch, saying which of their columns each column it wrote came
    from: the job's name."""
    catalog = Catalog(make_engine(Settings.under(home).catalog_url))
    with catalog.session() as session:
        [source] = session.exec(select(SourceFile.path).where(col(SourceFile.path).contains("/sales/clients/"))).all()
    crm = InputDataset("postgres://crm:5432", "crm.public.clients")
    products = InputDataset("file", version_path(home, "sales/products", 1))
    lineage = cl.ColumnLineageDatasetFacet(
        fields={
            "name": cl.Fields([field_from(crm, "first_name")]),
            "surname": cl.Fields([field_from(crm, "last_name", "DIRECT", "TRANSFORMATION")]),
            "order": cl.Fields([field_from(products, "product_id")]),
        },
        dataset=[field_from(crm, "active", "INDIRECT", "FILTER")],
    )
    batch = str(Settings.under(home).lake.resolve() / Path(source).parent)
    events = airflow_events(
        [crm, products], [OutputDataset("file", batch, facets={"columnLineage": lineage})], "export"
    )
    for event in events:
        openlineage.emit(event)
    return f"{AIRFLOW}/reports.export"


def origins(home: Path, capsys, column: str, *flags: str) -> list[dict]:
    found = custody(home, capsys, "lineage", "columns", "sales/clients@1", column, "--origins", *flags, "--json")
    return json.loads(found)["origins"]


def dependencies(origin: dict) -> set[tuple[str, str]]:
    return {(d["kind"], d["transformation"]) for d in origin["dependencies"]}


def test_origins_of_a_column_cross_into_the_custody_versions_the_job_that_wrote_its_batch_read(home, exported, capsys):
    found = origins(home, capsys, "order__product_id")

    [products] = [o for o in found if o.get("version") == "sales/products@1"]
    assert (products["dropzone_field"], products["via"]) == ("product_id", [exported])
    assert ("DIRECT", "TRANSFORMATION") in dependencies(products)


def test_origins_end_outside_custody_at_the_fields_the_job_said_it_read(home, exported, capsys):
    found = origins(home, capsys, "name")
    outside = {o["column"]: o for o in found if o.get("ends") == "outside custody"}

    assert outside["first_name"]["dataset"] == {"namespace": "postgres://crm:5432", "name": "crm.public.clients"}
    assert dependencies(outside["first_name"]) >= {("DIRECT", "IDENTITY")}
    assert dependencies(outside["active"]) == {("INDIRECT", "FILTER")}
    assert {o["via"][0] for o in outside.values()} == {exported}
    tree = custody(home, capsys, "lineage", "columns", "sales/clients@1", "name", "--origins")
    assert "crm.public.clients.first_name" in tree and f"through {exported}" in tree


def test_a_dropzone_field_the_job_said_nothing_of_stays_an_origin(home, exported, capsys):
    found = origins(home, capsys, "order__product_id")

    assert [o["dropzone_field"] for o in found if o.get("version") == "sales/clients@1"] == ["version"]


def test_direct_origins_across_the_edge_leave_out_what_only_filtered_the_rows(home, exported, capsys):
    found = origins(home, capsys, "name", "--direct")

    assert [(o["column"], dependencies(o)) for o in found] == [("first_name", {("DIRECT", "IDENTITY")})]


def test_impact_shows_what_each_column_the_job_wrote_derives_from(home, exported, capsys):
    [job] = [j for j in impact(home, "sales/products@1", capsys)["foreign_jobs"] if j["job_name"] == "reports.export"]
    [written] = job["outputs"]

    assert written["columns"]["columns"]["order"] == [
        {
            "version": "sales/products@1",
            "field": "product_id",
            "kind": "DIRECT",
            "transformation": "IDENTITY",
            "masking": False,
        }
    ]
    assert [(f["name"], f["field"]) for f in written["columns"]["every_column"]] == [("crm.public.clients", "active")]
    tree = custody(home, capsys, "impact", "sales/products@1")
    assert "order ← sales/products@1.product_id (DIRECT IDENTITY)" in tree


def test_the_provenance_graph_draws_the_job_that_wrote_a_dropzone_batch_from_what_it_read(
    home, exported, tmp_path, capsys
):
    target = tmp_path / "provenance.json"
    custody(home, capsys, "lineage", "graph", "sales/clients@1", "-o", str(target))
    drawn = json.loads(target.read_text())
    kinds = {node["id"]: node["kind"] for node in drawn["nodes"]}
    jobs = {node["job"]: node["id"] for node in drawn["nodes"] if node["kind"] == "foreign_job"}
    links = {(edge["source"], edge["target"]) for edge in drawn["edges"]}

    job = jobs[exported]
    [batch_file] = [node for node, kind in kinds.items() if kind == "file"]
    assert {(job, batch_file), (batch_file, "sales/clients@1")} <= links
    # sales/products@1 is no node of this graph: it is named by its reference.
    read = {"dataset:postgres://crm:5432/crm.public.clients@", "dataset:file/sales/products@1@"}
    assert {(dataset, job) for dataset in read} <= links


def snapshot_of(home: Path, ref: str) -> int:
    """The id of the Iceberg snapshot tagged for `ref`."""
    version = VersionRef.parse(ref)
    lake = open_lake(Settings.under(home))
    assert lake.tables is not None
    return lake.tables.tables.tags(version.key)[version.number]


def versioned(namespace: str, name: str, version: str, symlink: str | None = None) -> InputDataset:
    facets: dict = {"version": dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=version)}
    if symlink is not None:
        identifier = symlinks_dataset.Identifier(namespace="jdbc:sqlite", name=symlink, type="TABLE")
        facets["symlinks"] = symlinks_dataset.SymlinksDatasetFacet(identifiers=[identifier])
    return InputDataset(namespace, name, facets=facets)


def test_a_read_of_an_asset_s_table_joins_the_version_whose_snapshot_it_read(api, reporter, home):
    table = str(Settings.under(home).lake.resolve() / "_tables/sales/clients")
    by_location = versioned("file", table, str(snapshot_of(home, "sales/clients@1")))
    by_symlink = versioned(
        "file", "/elsewhere/clients", str(snapshot_of(home, "sales/products@1")), "custody.sales.products"
    )
    by_tag = versioned("trino://trino.example:8080", "custody.sales.clients", "custody-v1")
    [start, _] = (event_dict(e) for e in airflow_events([by_location, by_symlink, by_tag], [], "tables"))

    [received] = post(api, reporter, start).json()["received"]

    assert [found.get("version") for found in received["inputs"]] == [
        "sales/clients@1",
        "sales/products@1",
        "sales/clients@1",
    ]


def test_a_snapshot_of_an_asset_s_table_that_no_version_is_is_reported(api, reporter, home):
    table = str(Settings.under(home).lake.resolve() / "_tables/sales/clients")
    [start, _] = (event_dict(e) for e in airflow_events([versioned("file", table, "12345")], [], "stray_snapshot"))

    [received] = post(api, reporter, start).json()["received"]

    assert received["inputs"] == [
        {
            "namespace": "file",
            "name": table,
            "problem": "the table of sales/clients at snapshot 12345, which is no version of it",
        }
    ]


def test_a_read_of_a_version_before_it_is_committed_waits_for_it_then_joins_it_within_seconds(
    api, reporter, home, catalog, capsys
):
    folder = str(Settings.under(home).lake.resolve() / "landing/sales/products")
    [start, _] = (event_dict(e) for e in airflow_events([versioned("file", folder, "2")], [], "early", owner="mallory"))

    [received] = post(api, reporter, start).json()["received"]
    assert received["inputs"][0]["waiting for"] == "sales/products@2"
    assert "waiting for sales/products@2: read by 1 run, not committed yet" in custody(home, capsys, "repair")

    with pytest.MonkeyPatch.context() as monkeypatch:
        for name, value in plain_environ(home).items():
            monkeypatch.setenv(name, value)
        drop_demo_batches(Lake(Settings.from_env().lake))
        assert run_proven(["ingest", "sales/products", "--as", "bob"]) == 0

    run_id = start["run"]["runId"]
    deadline = time.monotonic() + 30
    while not (runs := [job["run_id"] for job in impact(home, "sales/products@2", capsys)["foreign_jobs"]]):
        assert time.monotonic() < deadline, "the waiting read was not joined"
        time.sleep(0.5)
    assert runs == [run_id]
    [entry] = outside_policy(catalog, run_id)
    assert (entry.actor, entry.asset_key, entry.version) == ("mallory", "sales/products", 2)
    assert "waiting for" not in custody(home, capsys, "repair")


def test_a_version_read_by_many_runs_shows_each_job_once_under_its_dag_with_its_runs_counted_and_last_failure(
    home, openlineage, capsys
):
    read = [InputDataset("file", version_path(home, "sales/products", 1))]
    runs = [
        airflow_events(read, [], "nightly", dag_run=str(uuid.uuid4()), end=end, error=error)
        for end, error in [(RunState.COMPLETE, None)] * 4
        + [(RunState.FAIL, "ZeroDivisionError: division by zero"), (RunState.COMPLETE, None)]
    ]
    for event in (event for events in runs for event in events):
        openlineage.emit(event)

    printed = custody(home, capsys, "impact", "sales/products@1")
    every = custody(home, capsys, "impact", "sales/products@1", "--runs")

    assert f"job {AIRFLOW}/reports not run by Custody, parent of 1 job in 6 runs" in printed
    assert f"job {AIRFLOW}/reports.nightly not run by Custody  6 runs: 5 COMPLETE, 1 FAIL" in printed
    assert "last failed run" in printed and "error: ZeroDivisionError: division by zero" in printed
    assert sum(events[0].run.runId[:8] in printed for events in runs) == 2  # the last run and the last failure
    assert all(events[0].run.runId[:8] in every for events in runs)
    [nightly] = [
        job for job in impact(home, "sales/products@1", capsys)["foreign_jobs"] if job["run_id"] == runs[4][0].run.runId
    ]
    assert (nightly["state"], nightly["error"], nightly["parent_job"]) == (
        "FAIL",
        "ZeroDivisionError: division by zero",
        f"{AIRFLOW}/reports",
    )


def dag_run_events(dag_run: str) -> list[RunEvent]:
    """The DAG run's own START and COMPLETE, as Airflow's provider sends them."""
    began = datetime.now(UTC)
    return [
        RunEvent(
            eventType=state,
            eventTime=(began + timedelta(seconds=seconds)).isoformat(),
            run=Run(runId=dag_run),
            job=Job(namespace=AIRFLOW, name="reports"),
            producer=PRODUCER,
        )
        for state, seconds in ((RunState.START, 0), (RunState.COMPLETE, 9))
    ]


def test_a_run_is_found_by_its_id_s_beginning_with_what_it_read_its_facets_parent_and_children(
    api, reporter, home, openlineage, catalog
):
    dag_run = str(uuid.uuid4())
    task = airflow_events(
        [InputDataset("file", version_path(home, "sales/clients", 1))], [], "looked_up", dag_run=dag_run
    )
    for event in [*dag_run_events(dag_run), *task]:
        openlineage.emit(event)
    run_id = task[0].run.runId

    found = requests.get(f"{api}/lineage/runs/{run_id[:13]}", headers=reporter, timeout=30).json()
    parent = requests.get(f"{api}/lineage/runs/{dag_run}", headers=reporter, timeout=30).json()

    assert (found["run_id"], found["state"], found["events_received"]) == (run_id, "COMPLETE", 2)
    assert found["inputs"][0]["custody"] == "sales/clients@1" and "events" not in found
    assert found["parent"] == {"run_id": dag_run, "job_namespace": AIRFLOW, "job_name": "reports"}
    assert "facets" not in found  # they may carry a stack trace, a job's properties: for auditors
    assert [child["run_id"] for child in parent["children"]] == [run_id]


def test_a_run_s_events_as_received_are_for_auditors_and_each_asking_is_recorded(
    api, reporter, home, openlineage, catalog
):
    events = airflow_events([], [], "audited")
    for event in events:
        openlineage.emit(event)
    run_id = events[0].run.runId

    refused = requests.get(f"{api}/lineage/runs/{run_id}", params={"events": "true"}, headers=reporter, timeout=30)
    allowed = requests.get(
        f"{api}/lineage/runs/{run_id}", params={"events": "true"}, headers=token(api, "dave"), timeout=30
    )

    assert refused.status_code == 403
    assert [event["eventType"] for event in allowed.json()["events"]] == ["START", "COMPLETE"]
    assert allowed.json()["facets"]["airflow"]["task"]["task_id"] == "audited"
    with catalog.session() as session:
        asked = session.exec(select(LedgerEntry).where(LedgerEntry.action == "ledger.read")).all()
    said = [
        (entry.actor, json.loads(entry.details)["result"])
        for entry in asked
        if json.loads(entry.details).get("run") == run_id
    ]
    assert said == [("lineage-bot", "denied"), ("dave", "allowed")]


@pytest.mark.parametrize(
    ("given", "status", "said"),
    [
        ("0123", 400, "run 0123: give at least 8 characters of a run's id"),
        ("ffffffff-ffff", 404, "no run of another tool's job has an id beginning ffffffff-ffff"),
    ],
)
def test_a_run_asked_by_too_short_or_an_unknown_id_is_refused_in_one_line(api, reporter, given, status, said):
    answer = requests.get(f"{api}/lineage/runs/{given}", headers=reporter, timeout=30)

    assert (answer.status_code, answer.json()["detail"]) == (status, said)


def test_jobs_are_listed_with_their_runs_counted_by_state_and_a_job_s_runs_newest_first(
    api, reporter, home, openlineage, capsys
):
    runs = [airflow_events([], [], "history", end=end) for end in (RunState.COMPLETE, RunState.FAIL, RunState.COMPLETE)]
    for event in (event for events in runs for event in events):
        openlineage.emit(event)

    [job] = [
        job
        for job in requests.get(f"{api}/lineage/jobs", headers=reporter, timeout=30).json()["jobs"]
        if job["name"] == "reports.history"
    ]
    history = requests.get(
        f"{api}/lineage/runs", params={"namespace": AIRFLOW, "job": "reports.history"}, headers=reporter, timeout=30
    ).json()["runs"]
    listed = custody(home, capsys, "lineage", "runs", "--namespace", AIRFLOW, "--job", "reports.history")

    assert (job["runs"], job["states"], job["last_run"]["run_id"]) == (
        3,
        {"COMPLETE": 2, "FAIL": 1},
        runs[-1][0].run.runId,
    )
    assert [run["run_id"] for run in history] == [events[0].run.runId for events in reversed(runs)]
    assert all(events[0].run.runId[:8] in listed for events in runs)
    assert "reports.history" in custody(home, capsys, "lineage", "jobs")


def test_dataset_and_job_events_are_kept_once_and_shown_with_the_job_and_the_dataset(
    api, reporter, home, openlineage, capsys
):
    from openlineage.client.event_v2 import DatasetEvent, JobEvent, StaticDataset
    from openlineage.client.facet_v2 import schema_dataset

    now = datetime.now(UTC).isoformat()
    fields = [schema_dataset.SchemaDatasetFacetFields("client_id", "BIGINT")]
    table = StaticDataset(
        "postgres://warehouse:5432",
        "marts.public.clients",
        facets={"schema": schema_dataset.SchemaDatasetFacet(fields)},
    )
    declared = JobEvent(
        eventTime=now,
        producer=PRODUCER,
        job=Job(namespace=AIRFLOW, name="reports.declared"),
        inputs=[InputDataset("file", version_path(home, "sales/clients", 1))],
        outputs=[OutputDataset(table.namespace, table.name)],
    )
    described = DatasetEvent(eventTime=now, producer=PRODUCER, dataset=table)

    first = post(api, reporter, [event_dict(declared), event_dict(described)])
    again = post(api, reporter, event_dict(declared))

    assert first.status_code == 200, first.text
    assert [(said["eventType"], said["received"]) for said in first.json()["received"]] == [
        ("JobEvent", "stored"),
        ("DatasetEvent", "stored"),
    ]
    assert again.json()["received"][0]["received"] == "already stored"
    [job] = [
        job
        for job in requests.get(f"{api}/lineage/jobs", headers=reporter, timeout=30).json()["jobs"]
        if job["name"] == "reports.declared"
    ]
    assert (job["runs"], job["declared"]["outputs"]) == (0, [{"namespace": table.namespace, "name": table.name}])
    dataset = json.loads(
        custody(home, capsys, "lineage", "dataset", "--namespace", table.namespace, "--name", table.name, "--json")
    )
    assert [(field["name"], field["type"]) for field in dataset["facets"]["schema"]["fields"]] == [
        ("client_id", "BIGINT")
    ]


def test_a_parent_run_that_reported_nothing_itself_is_found_by_the_runs_it_is_the_parent_of(api, reporter, openlineage):
    dag_run = str(uuid.uuid4())
    task = airflow_events([], [], "orphaned", dag_run=dag_run)
    for event in task:
        openlineage.emit(event)

    parent = requests.get(f"{api}/lineage/runs/{dag_run}", headers=reporter, timeout=30).json()

    assert (parent["state"], parent["job_name"], parent["events_received"]) == ("NOT REPORTED", "reports", 0)
    assert [child["run_id"] for child in parent["children"]] == [task[0].run.runId]


def test_a_field_of_another_kind_of_event_beside_an_event_s_own_is_kept_as_it_is(api, reporter):
    [start, _] = (event_dict(e) for e in airflow_events([], [], "odd"))
    described = {
        "eventTime": start["eventTime"],
        "producer": PRODUCER,
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/DatasetEvent",
        "dataset": {"namespace": "file", "name": "/tmp/odd"},
        "job": "not a job",
    }

    answer = post(api, reporter, [{**start, "dataset": 5}, described])

    assert answer.status_code == 200, answer.text
    assert [said["received"] for said in answer.json()["received"]] == ["stored", "stored"]
