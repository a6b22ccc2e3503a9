"""OpenLineage: every ingestion and materialization emits START, then COMPLETE or FAIL, through the configured transport.

Every event a test emits is validated against the specification's JSON Schema (tests/openlineage_spec.py).
"""

from __future__ import annotations

import json
import operator
import threading
import uuid
from functools import reduce
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from governance.demo import CLIENTS, NAMES_AND_PRODUCTS, PRODUCTS, drop_demo_batches
from governance.errors import InvalidInput, TransformError, ValidationFailed
from governance.ingest import ingest
from governance.integrate import materialize
from governance.lineage.openlineage import Emitter, JobRun, transport_config
from governance.runs import RunRequest
from governance.spec import Spec
from governance.zones import AssetKey, Zone
from tests.conftest import DATA, drop
from tests.openlineage_spec import read_events, validate_event

DAGSTER_RUN = str(uuid.uuid4())


def request() -> RunRequest:
    return RunRequest(requested_by="bob", run_id=DAGSTER_RUN, job_name="__ASSET_JOB")


@pytest.fixture
def events_file(tmp_path) -> Path:
    return tmp_path / "ol" / "events.jsonl"


@pytest.fixture
def emitter(events_file, tmp_path) -> Emitter:
    return Emitter(transport_config(f"file:{events_file}", tmp_path))


@pytest.fixture
def landed(spark, catalog, lake, demo_specs, emitter):
    dropped = drop_demo_batches(lake)
    ingest(spark, catalog, lake, demo_specs[PRODUCTS], request(), batch_id=dropped.products_batch, events=emitter)
    ingest(spark, catalog, lake, demo_specs[CLIENTS], request(), batch_id=dropped.client_batches[0], events=emitter)
    return dropped


def test_an_ingestion_emits_start_then_complete_from_the_batch_to_the_landing_folder(landed, lake, events_file):
    start, complete = read_events(events_file)[:2]
    assert (start["eventType"], complete["eventType"]) == ("START", "COMPLETE")
    assert start["run"]["runId"] == complete["run"]["runId"]
    assert complete["job"] == {"namespace": "custody", "name": "sales/products", "facets": complete["job"]["facets"]}
    [dropped] = complete["inputs"]
    assert dropped["namespace"] == "file" and dropped["name"] == str(lake.batch_dir(PRODUCTS, landed.products_batch))
    [landing] = complete["outputs"]
    assert landing["name"] == str(lake.zone_dir(Zone.LANDING, PRODUCTS))
    assert landing["facets"]["version"]["datasetVersion"] == "1"
    assert "product_id" in [f["name"] for f in landing["facets"]["schema"]["fields"]]
    owners = {o["type"]: o["name"] for o in landing["facets"]["ownership"]["owners"]}
    assert owners == {
        "owner": "group:sales-owners",
        "producer": "group:sales-producers",
        "consumer": "group:sales-consumers",
    }


def test_a_materialization_names_its_pinned_inputs_and_its_dagster_parent_run(
    spark, catalog, lake, demo_specs, landed, emitter, events_file
):
    materialize(spark, catalog, lake, demo_specs[NAMES_AND_PRODUCTS], request(), events=emitter)
    complete = read_events(events_file)[-1]
    assert complete["eventType"] == "COMPLETE" and complete["job"]["name"] == "sales/names_and_products"
    versions = {Path(d["name"]).name: d["facets"]["version"]["datasetVersion"] for d in complete["inputs"]}
    assert versions == {"clients": "1", "products": "1"}
    parent = complete["run"]["facets"]["parent"]
    assert parent["run"]["runId"] == DAGSTER_RUN
    assert (parent["job"]["namespace"], parent["job"]["name"]) == ("dagster", "__ASSET_JOB")
    for facet in (parent, complete["outputs"][0]["facets"]["schema"]):
        assert facet["_producer"].startswith("urn:custody:") and facet["_schemaURL"].startswith(
            "https://openlineage.io/spec/"
        )


def test_a_failed_materialization_emits_fail_with_the_error(
    spark, catalog, lake, demo_specs, landed, emitter, events_file
):
    base = demo_specs[NAMES_AND_PRODUCTS]
    broken = Spec(base.key, base.file, base.body.model_copy(update={"transform": "tests.transforms:fails"}))
    with pytest.raises(TransformError):
        materialize(spark, catalog, lake, broken, request(), events=emitter)
    start, fail = read_events(events_file)[-2:]
    assert (start["eventType"], fail["eventType"]) == ("START", "FAIL")
    assert "no_such_column" in fail["run"]["facets"]["errorMessage"]["message"]
    assert fail["outputs"] == []


@pytest.mark.parametrize(
    ("asset", "file"),
    [("t/people", "csv/wrong_types.csv"), ("t/events", "json/some_bad_lines.json")],
)
def test_an_ingestion_with_quarantined_rows_emits_events_that_follow_the_spec(
    spark, catalog, lake, test_specs, emitter, events_file, asset, file
):
    drop(lake, asset, "b1", {Path(file).name: DATA / "batches" / file})
    row = ingest(spark, catalog, lake, test_specs[AssetKey.parse(asset)], request(), batch_id="b1", events=emitter)
    assert row.rows_quarantined > 0
    start, complete = read_events(events_file)
    assert (start["eventType"], complete["eventType"]) == ("START", "COMPLETE")
    assert [d["facets"]["version"]["datasetVersion"] for d in complete["outputs"]] == ["1"]


def test_a_failed_ingestion_emits_fail_with_the_error(spark, catalog, lake, test_specs, emitter, events_file):
    drop(lake, "t/people", "b1", {"t.csv": DATA / "batches" / "csv" / "mostly_bad.csv"})
    with pytest.raises(ValidationFailed, match="more than max_bad_fraction"):
        ingest(spark, catalog, lake, test_specs[AssetKey.parse("t/people")], request(), batch_id="b1", events=emitter)
    start, fail = read_events(events_file)
    assert (start["eventType"], fail["eventType"]) == ("START", "FAIL")
    assert "more than max_bad_fraction" in fail["run"]["facets"]["errorMessage"]["message"]
    assert fail["outputs"] == []


class Collector(BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[str, str, dict]]] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.received.append((self.path, self.headers.get("Authorization", ""), body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def collector():
    Collector.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", Collector.received
    server.shutdown()
    for _, _, event in Collector.received:
        validate_event(event)


def test_events_go_to_an_http_endpoint_with_the_api_key_from_the_environment(
    spark, catalog, lake, demo_specs, tmp_path, collector
):
    url, received = collector
    emitter = Emitter(transport_config(url, tmp_path, api_key="canary-key"))
    dropped = drop_demo_batches(lake)
    ingest(spark, catalog, lake, demo_specs[PRODUCTS], request(), batch_id=dropped.products_batch, events=emitter)
    assert [(path, auth, body["eventType"]) for path, auth, body in received] == [
        ("/api/v1/lineage", "Bearer canary-key", "START"),
        ("/api/v1/lineage", "Bearer canary-key", "COMPLETE"),
    ]


def test_an_unreachable_endpoint_is_a_warning_not_a_failure(spark, catalog, lake, demo_specs, tmp_path):
    said = []
    emitter = Emitter(transport_config("http://127.0.0.1:9", tmp_path))
    dropped = drop_demo_batches(lake)
    row = ingest(
        spark,
        catalog,
        lake,
        demo_specs[PRODUCTS],
        request(),
        batch_id=dropped.products_batch,
        events=emitter,
        progress=said.append,
    )
    assert row.number == 1
    assert any(line.startswith("warning: OpenLineage START event for sales/products not sent") for line in said)


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("off", None),
        ("console", {"type": "console"}),
        ("file", {"type": "file", "log_file_path": "/h/openlineage/events.jsonl", "append": True}),
        (
            "https://lineage.example/",
            {
                "type": "http",
                "url": "https://lineage.example/",
                "timeout": 5,
                "retry": {"total": 1, "backoff_factor": 0.2},
            },
        ),
    ],
)
def test_the_transport_is_chosen_by_one_setting(setting, expected):
    assert transport_config(setting, Path("/h")) == expected


def test_an_unknown_transport_is_refused_with_the_setting_named():
    with pytest.raises(InvalidInput, match="CUSTODY_OPENLINEAGE='kafka' is not a transport"):
        transport_config("kafka", Path("/h"))


def test_a_run_id_that_is_not_a_uuid_leaves_the_parent_out(emitter, events_file):
    job = JobRun("sales/x", "TRANSFORMATION", RunRequest(requested_by="bob", run_id="run-1"), [])
    with emitter.running(job):
        pass
    start, complete = read_events(events_file)
    assert (start["eventType"], complete["eventType"]) == ("START", "COMPLETE")
    assert "parent" not in complete["run"]["facets"]


def emitted(emitter: Emitter, events_file: Path) -> dict:
    with emitter.running(JobRun("sales/x", "TRANSFORMATION", request(), [])):
        pass
    return read_events(events_file)[-1]


def test_a_facet_whose_schema_url_names_no_schema_here_fails_the_check(emitter, events_file):
    event = emitted(emitter, events_file)
    event["run"]["facets"]["parent"]["_schemaURL"] = (
        "https://openlineage.io/spec/facets/9-9-9/ParentRunFacet.json#/$defs/ParentRunFacet"
    )
    with pytest.raises(
        AssertionError, match=r"run\.facets\.parent: schema URL '.*/9-9-9/ParentRunFacet\.json#.*' names no schema"
    ):
        validate_event(event)


def test_a_facet_in_a_place_of_another_kind_fails_the_check(emitter, events_file):
    event = emitted(emitter, events_file)
    event["job"]["facets"]["parent"] = event["run"]["facets"]["parent"]
    with pytest.raises(AssertionError, match=r"job\.facets\.parent: .*ParentRunFacet does not extend JobFacet"):
        validate_event(event)


@pytest.mark.parametrize(
    ("place", "value", "message"),
    [
        (("run", "runId"), "run-1", r"event at \$\.run\.runId: 'run-1' is not a 'uuid'"),
        (("eventTime",), "yesterday", r"event at \$\.eventTime: 'yesterday' is not a 'date-time'"),
        (("producer",), "custody 0.1", r"event at \$\.producer: 'custody 0\.1' is not a 'uri'"),
        (
            ("run", "facets", "parent", "run", "runId"),
            "run-1",
            r"run\.facets\.parent at \$\.run\.runId: 'run-1' is not a 'uuid'",
        ),
        (
            ("job", "facets", "jobType", "processingType"),
            None,
            r"job\.facets\.jobType at \$\.processingType: None is not of type 'string'",
        ),
    ],
    ids=[
        "run_id_not_a_uuid",
        "event_time_not_a_date_time",
        "producer_not_a_uri",
        "parent_run_id_not_a_uuid",
        "facet_field_of_the_wrong_type",
    ],
)
def test_an_event_that_breaks_the_spec_fails_the_check_naming_the_place(emitter, events_file, place, value, message):
    event = emitted(emitter, events_file)
    *parents, last = place
    reduce(operator.getitem, parents, event)[last] = value
    with pytest.raises(AssertionError, match=message):
        validate_event(event)
