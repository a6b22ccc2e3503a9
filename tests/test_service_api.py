"""The Custody service's HTTP API: tokens from directory passwords, then the catalog, versions,
lineage, the ledger for auditors and rows for entitled users, each endpoint asked by a user it serves
and by one it refuses; and a client that holds no credential of the catalog or the lake reading as
a consumer and as an auditor through it.

One home, with the demo's versions made by bob, and one `custody serve` on it serve every test."""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pyarrow as pa
import pytest
import requests
from anyio import to_thread
from itsdangerous import URLSafeTimedSerializer
from sqlalchemy import text
from sqlmodel import col, func, select

from governance.access.policy import Identity
from governance.access.settings import change_setting, pinned_settings
from governance.api import Custody
from governance.catalog import Catalog
from governance.catalog.engine import make_engine
from governance.catalog.models import LedgerEntry, LineageEdge, ServiceSession
from governance.config import Settings
from governance.demo import demo_password, drop_demo_batches
from governance.errors import AccessDenied, CatalogUnavailable, InvalidInput, NotSignedIn
from governance.lineage.resident import resident
from governance.runs import Assurance
from governance.service.app import api_threads, create_app
from governance.service.recent import Recent
from governance.service.remote import RemoteCustody
from governance.service.sessions import Sessions, SessionSettings, new_session_id
from governance.zones import Lake
from tests.conftest import DEMO_SPECS, plain_environ
from tests.dagster_servers import client, start_service, stop, token
from tests.graphs import add_versions
from tests.helpers import edit_spec, expire_newest_token, run_proven

pytestmark = pytest.mark.xdist_group("service-api")
CUSTODY = Path(sys.executable).with_name("custody")


@pytest.fixture(scope="module")
def specs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the demo's spec files, which a test edits as an owner does."""
    return Path(shutil.copytree(DEMO_SPECS, tmp_path_factory.mktemp("service-specs") / "specs"))


def environ(home: Path, specs: Path) -> dict[str, str]:
    return {**plain_environ(home), "CUSTODY_SPECS": str(specs)}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, spark, specs: Path) -> Path:
    """products@1 and clients@1 ingested and names_and_products@1 materialized, by bob."""
    home = tmp_path_factory.mktemp("service-api") / "home"
    with pytest.MonkeyPatch.context() as monkeypatch:
        for name, value in environ(home, specs).items():
            monkeypatch.setenv(name, value)
        drop_demo_batches(Lake(Settings.from_env().lake))
        for args in (
            ["ingest", "sales/products"],
            ["ingest", "sales/clients"],
            ["materialize", "key:sales/names_and_products"],
        ):
            assert run_proven([*args, "--as", "bob"]) == 0
    return home


@pytest.fixture(scope="module")
def api(home: Path, specs: Path) -> Iterator[str]:
    server, port = start_service(
        Settings.under(home), {**environ(home, specs), "CUSTODY_LOGIN_DELAY_SECONDS": "0.01"}, ui=False
    )
    yield f"http://127.0.0.1:{port}/api/v1"
    stop(server)


@pytest.fixture(scope="module")
def catalog(home: Path) -> Catalog:
    return Catalog(make_engine(Settings.under(home).catalog_url))


def entries(catalog: Catalog, action: str, actor: str) -> list[dict]:
    with catalog.session() as session:
        found = session.exec(
            select(LedgerEntry)
            .where(LedgerEntry.action == action, LedgerEntry.actor == actor)
            .order_by(col(LedgerEntry.seq))
        ).all()
    return [{"assurance": e.assurance, **json.loads(e.details)} for e in found]


WORKERS = ("--workers", "2")
READS = (
    "/catalog",
    "/access/sales/clients",
    "/access/sales/clients/explain",
    "/specs/edits",
    "/specs/sales/clients/history",
    "/assets/sales/clients",
    "/assets/sales/clients/versions",
    "/versions/sales/names_and_products/1/provenance",
    "/versions/sales/clients/1/impact",
    "/assets/sales/clients/rows",
    "/ledger",
    "/whoami",
    "/versions/sales/names_and_products/1/columns",
    "/versions/sales/names_and_products/1/columns/amount",
    "/versions/sales/names_and_products/1/graph",
    "/runs/0b6c3f9e-8d6f-4a8e-9a51-3f7c6bb4a1de",
    "/settings",
    "/tables",
    "/lineage/runs/0b6c3f9e-8d6f-4a8e-9a51-3f7c6bb4a1de",
    "/lineage/runs?namespace=airflow&job=reports",
    "/lineage/jobs",
    "/lineage/datasets?namespace=file&name=x",
)
CHANGES = (
    ("PUT", "/access/sales/clients/consumer", {"user": "eve"}),
    ("DELETE", "/access/sales/clients/consumer/eve", None),
    ("PUT", "/versions/sales/clients/1/status", {"status": "critical"}),
    ("POST", "/specs/apply", {"assets": []}),
    ("POST", "/purge", {"dry_run": True}),
    ("POST", "/runs", {"assets": ["sales/products"]}),
    ("PUT", "/settings/auditor_group", {"value": "sales-owners"}),
    ("DELETE", "/tokens/current", None),
)


def test_a_token_comes_from_a_directory_password_and_is_recorded(api, catalog):
    answer = requests.post(f"{api}/tokens", json={"user": "carol", "password": demo_password("carol")}, timeout=60)
    assert answer.status_code == 201
    assert {k: v for k, v in answer.json().items() if k not in ("token", "device")} == {
        "user": "carol",
        "method": "password",
        "expires_in": 3600,
    }
    assert answer.json()["device"]  # this client's, for the next sign-in
    me = requests.get(f"{api}/whoami", headers={"Authorization": f"Bearer {answer.json()['token']}"}, timeout=30)
    assert me.json() == {"user": "carol", "method": "password"}
    [issued] = [e for e in entries(catalog, "authenticate", "carol") if e["channel"] == "api"][-1:]
    assert (issued["result"], issued["assurance"], issued["method"]) == ("allowed", "verified", "password")


def test_a_wrong_password_gets_401_and_no_token(api, catalog):
    answer = requests.post(f"{api}/tokens", json={"user": "eve", "password": "guess"}, timeout=60)
    assert (answer.status_code, answer.json()) == (401, {"detail": "eve: unknown user or wrong password"})
    assert entries(catalog, "authenticate", "eve")[-1]["result"] == "denied"


def test_every_endpoint_refuses_no_token_an_expired_one_and_one_signed_with_another_key(api, catalog):
    expired = token(api, "carol")
    newest = expire_newest_token(catalog)
    foreign = URLSafeTimedSerializer(b"another service's key, 32 bytes long", salt="custody-token").dumps(newest)
    refusals = (
        ({}, "this needs a token: `custody login`, or POST /api/v1/tokens with a user and password"),
        (expired, "this token has expired: sign in again"),
        (
            {"Authorization": f"Bearer {foreign}"},
            "this token is expired or was not made by this service: sign in again",
        ),
    )
    asked = [("GET", path, None) for path in READS] + list(CHANGES)
    for headers, said in refusals:
        for method, path, body in asked:
            answer = requests.request(method, f"{api}{path}", json=body, headers=headers, timeout=30)
            assert (answer.status_code, answer.json()["detail"]) == (401, said), (method, path)


def test_a_request_without_a_token_is_recorded(api, catalog):
    requests.get(f"{api}/catalog", headers={"Authorization": "Basic Ym9iOmJvYg=="}, timeout=30)
    refused = [e for e in entries(catalog, "session", "anonymous") if e["channel"] == "api"]
    assert refused and refused[-1]["result"] == "denied" and refused[-1]["path"].startswith("/api/v1/")


def test_a_browser_session_s_cookie_is_no_token(api):
    browser = requests.Session()
    base = api.removesuffix("/api/v1")
    form = browser.get(f"{base}/login", timeout=30)
    token_field = form.text.split('name="csrf" value="')[1].split('"')[0]
    browser.post(
        f"{base}/login",
        data={"user": "carol", "password": demo_password("carol"), "csrf": token_field},
        allow_redirects=False,
    )
    cookie = browser.cookies["custody_session"]
    answer = requests.get(f"{api}/whoami", headers={"Authorization": f"Bearer {cookie}"}, timeout=30)
    assert answer.status_code == 401


def test_the_catalog_versions_and_lineage_answer_any_signed_in_user_as_the_cli_does(api, home):
    headers = token(api, "eve")
    listed = requests.get(f"{api}/catalog", headers=headers, timeout=30).json()
    assert [entry["key"] for entry in listed] == [
        "sales/clients",
        "sales/names_and_products",
        "sales/products",
    ]
    page = requests.get(f"{api}/assets/sales/clients/versions", headers=headers, timeout=30)
    assert [(v["number"], v["requested_by"]) for v in page.json()] == [(1, "bob")]
    assert page.headers["X-Custody-Versions"] == "1"
    tree = requests.get(f"{api}/versions/sales/names_and_products/1/provenance", headers=headers, timeout=30).json()
    assert {node["asset"] for node in tree["inputs"]} == {"sales/clients", "sales/products"}
    impact = requests.get(f"{api}/versions/sales/clients/1/impact", headers=headers, timeout=30).json()
    assert [node["asset"] for node in impact["dependents"]] == ["sales/names_and_products"]
    detail = requests.get(f"{api}/assets/sales/clients", headers=headers, timeout=30).json()
    assert detail["key"] == "sales/clients"


def test_rows_come_as_arrow_to_an_entitled_user_and_are_refused_to_another_both_recorded(api, catalog, home):
    answer = requests.get(
        f"{api}/assets/sales/products/rows", params={"limit": 2}, headers=token(api, "carol"), timeout=60
    )
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/vnd.apache.arrow.stream"
    assert (answer.headers["x-custody-version"], answer.headers["x-custody-rows"]) == ("sales/products@1", "4")
    table = pa.ipc.open_stream(answer.content).read_all()
    assert table.num_rows == 2 and "product_name" in table.column_names
    refused = requests.get(f"{api}/assets/sales/products/rows", headers=token(api, "eve"), timeout=60)
    assert (refused.status_code, refused.json()["detail"]) == (
        403,
        (
            "eve may not read sales/products: it needs consumer (sales-consumers) or producer "
            "(sales-producers) or owner (sales-owners)"
        ),
    )
    reads = [
        (e["result"], e["channel"], e["assurance"])
        for e in entries(catalog, "read", "carol") + entries(catalog, "read", "eve")
    ]
    assert reads == [("allowed", "api", "verified"), ("denied", "api", "verified")]


def test_the_ledger_answers_an_auditor_and_refuses_a_consumer_both_recorded(api, catalog):
    answer = requests.get(
        f"{api}/ledger", params={"action": "ingestion.committed"}, headers=token(api, "dave"), timeout=30
    )
    assert answer.status_code == 200
    assert [(e["asset_key"], e["actor"]) for e in answer.json()] == [
        ("sales/products", "bob"),
        ("sales/clients", "bob"),
    ]
    refused = requests.get(f"{api}/ledger", headers=token(api, "carol"), timeout=30)
    assert (refused.status_code, refused.json()["detail"]) == (
        403,
        "carol may not read the ledger: it needs the auditor group (auditors) or the admin group (custody-admins)",
    )
    assert [e["result"] for e in entries(catalog, "ledger.read", "dave")] == ["allowed"]
    assert [e["result"] for e in entries(catalog, "ledger.read", "carol")] == ["denied"]


def test_the_ledger_s_tail_shows_each_new_entry_at_once_though_full_pages_are_kept(api):
    dave = token(api, "dave")
    mine = {"actor": "dave", "action": "ledger.read"}

    def page(**asked: object) -> list[dict]:
        answer = requests.get(f"{api}/ledger", params={**mine, **asked}, headers=dave, timeout=30)
        answer.raise_for_status()
        return answer.json()

    first, second = page(), page()
    assert [e["seq"] for e in second[:-1]] == [e["seq"] for e in first]  # and the second read's own
    assert page(limit=1) == page(limit=1) == first[:1]


def test_an_admin_s_change_of_a_setting_counts_from_the_service_s_next_decision(api, catalog, home, specs):
    dave = token(api, "dave")
    assert requests.get(f"{api}/ledger", params={"limit": 1}, headers=dave, timeout=30).status_code == 200
    alice = Identity("alice", Assurance.VERIFIED, "password", "cli")
    settings = Settings.from_env(environ(home, specs))
    auditors = pinned_settings(catalog, settings, {})["auditor_group"]
    change_setting(catalog, settings, {}, alice, "auditor_group", "sales-owners")
    try:
        refused = requests.get(f"{api}/ledger", params={"limit": 1}, headers=dave, timeout=30)
    finally:
        change_setting(catalog, settings, {}, alice, "auditor_group", auditors)
    assert (refused.status_code, refused.json()["detail"]) == (
        403,
        "dave may not read the ledger: it needs the auditor group (sales-owners) or the admin group (custody-admins)",
    )
    assert [e["result"] for e in entries(catalog, "ledger.read", "dave")][-2:] == ["allowed", "denied"]


def test_access_shows_each_role_and_explains_what_a_user_may_do_recording_nothing(api, catalog):
    headers = token(api, "eve")
    before = len(entries(catalog, "read", "eve"))
    shown = requests.get(f"{api}/access/sales/clients", headers=headers, timeout=30).json()
    assert {(r["role"], r["group"], tuple(r["members"])) for r in shown["roles"]} == {
        ("owner", "sales-owners", ("alice",)),
        ("producer", "sales-producers", ("bob",)),
        ("consumer", "sales-consumers", ("carol",)),
    }
    mine = requests.get(f"{api}/access/sales/clients/explain", headers=headers, timeout=30).json()
    assert mine["user"] == "eve" and {d["action"]: d["result"] for d in mine["decisions"]}["read"] == "denied"
    carols = requests.get(f"{api}/access/sales/clients/explain", params={"user": "carol"}, headers=headers, timeout=30)
    assert {d["action"]: d["reason"] for d in carols.json()["decisions"]}["read"] == (
        "carol is in sales-consumers, consumer of sales/clients"
    )
    assert len(entries(catalog, "read", "eve")) == before


def test_an_owner_grants_and_revokes_a_role_and_anyone_else_is_refused_all_recorded(api, catalog):
    alice, eve = token(api, "alice"), token(api, "eve")
    refused = requests.put(f"{api}/access/sales/clients/consumer", json={"user": "eve"}, headers=eve, timeout=30)
    assert (refused.status_code, refused.json()["detail"]) == (
        403,
        "eve may not grant roles on sales/clients: it needs owner (sales-owners)",
    )
    granted = requests.put(f"{api}/access/sales/clients/consumer", json={"user": "eve"}, headers=alice, timeout=30)
    assert granted.status_code == 200 and (granted.json()["group"], granted.json()["changed"]) == (
        "sales-consumers",
        True,
    )
    assert requests.get(f"{api}/assets/sales/clients/rows", headers=eve, timeout=60).status_code == 200
    revoked = requests.delete(f"{api}/access/sales/clients/consumer/eve", headers=alice, timeout=30)
    assert revoked.status_code == 200 and revoked.json()["changed"] is True
    assert requests.get(f"{api}/assets/sales/clients/rows", headers=eve, timeout=60).status_code == 403
    grants = [(e["result"], e["channel"], e["method"]) for e in entries(catalog, "grant", "alice")]
    assert grants == [("allowed", "api", "password")]
    assert [e["result"] for e in entries(catalog, "grant", "eve")] == ["denied"]
    assert [e["result"] for e in entries(catalog, "revoke", "alice")] == ["allowed"]
    for method in ("PUT", "DELETE"):
        path = "/access/sales/clients/consumer" + ("/eve" if method == "DELETE" else "")
        assert requests.request(method, f"{api}{path}", json={"user": "eve"}, timeout=30).status_code == 401


def test_an_owner_marks_a_version_critical_and_normal_again_and_a_producer_may_not(api, catalog):
    path = f"{api}/versions/sales/products/1/status"
    refused = requests.put(path, json={"status": "critical"}, headers=token(api, "bob"), timeout=30)
    assert (refused.status_code, refused.json()["detail"]) == (
        403,
        "bob may not change the status of sales/products: it needs owner (sales-owners)",
    )
    alice = token(api, "alice")
    marked = requests.put(path, json={"status": "critical"}, headers=alice, timeout=30)
    assert marked.status_code == 200 and (marked.json()["before"], marked.json()["after"]) == ("normal", "critical")
    assert requests.put(path, json={"status": "normal"}, headers=alice, timeout=30).json()["after"] == "normal"
    assert [(e["result"], e["to"], e["channel"]) for e in entries(catalog, "status", "alice")] == [
        ("allowed", "critical", "api"),
        ("allowed", "normal", "api"),
    ]


def test_an_owner_applies_the_edited_specs_the_service_reads_and_the_history_shows_it(api, catalog, specs):
    eve, alice = token(api, "eve"), token(api, "alice")
    edits = f"{api}/specs/edits"
    assert requests.get(edits, params={"asset": "sales/products"}, headers=eve, timeout=60).json() == []
    edit_spec(specs, "sales/products", "delivered as CSV.", "delivered as CSV, daily.")
    pending = requests.get(edits, params={"asset": "sales/products"}, headers=eve, timeout=60).json()
    said = "~ description: The product catalogue with prices, delivered as CSV. -> The product catalogue with prices, delivered as CSV, daily."
    assert [(e["asset"], e["changes"]) for e in pending] == [("sales/products", [said])]
    wanted = {"assets": ["sales/products"]}
    refused = requests.post(f"{api}/specs/apply", json=wanted, headers=eve, timeout=60)
    assert refused.status_code == 403 and refused.json()["detail"].startswith(
        "eve may not apply the spec of sales/products"
    )
    applied = requests.post(f"{api}/specs/apply", json=wanted, headers=alice, timeout=60)
    assert applied.status_code == 200, applied.text
    assert [(a["asset"], a["by"], a["assurance"]) for a in applied.json()] == [("sales/products", "alice", "verified")]
    assert requests.get(edits, params={"asset": "sales/products"}, headers=eve, timeout=60).json() == []
    history = requests.get(f"{api}/specs/sales/products/history", headers=eve, timeout=30).json()
    assert [(h["applied_by"], h["assurance"]) for h in history][-1] == ("alice", "verified")
    decided = [(e["result"], e["channel"]) for e in entries(catalog, "spec.apply", "alice")]
    assert decided == [("allowed", "api")]


def test_column_lineage_answers_any_signed_in_user_as_the_cli_shows_it(api):
    headers = token(api, "eve")
    base = f"{api}/versions/sales/names_and_products/1/columns"
    overview = requests.get(base, headers=headers, timeout=30).json()
    assert overview["version"] == "sales/names_and_products@1" and overview["recorded"] is True
    assert [(d["input"], d["column"]) for d in overview["columns"]["amount"]] == [
        ("sales/clients@1", "order__quantity"),
        ("sales/products@1", "unit_price"),
    ]
    begins = requests.get(
        f"{base}/product_name", params={"origins": "true", "direct": "true"}, headers=headers, timeout=30
    ).json()
    [origin] = begins["origins"]
    assert (origin["version"], origin["dropzone_field"]) == ("sales/products@1", "product_name")
    assert origin["files"] and len(origin["files"][0]["sha256"]) == 64
    tree = requests.get(f"{base}/amount", headers=headers, timeout=30).json()
    assert {child["version"] for child in tree["inputs"]} == {"sales/clients@1", "sales/products@1"}


def test_a_lineage_graph_comes_in_the_format_asked_with_its_size_in_headers(api):
    headers, path = token(api, "eve"), f"{api}/versions/sales/names_and_products/1/graph"
    svg = requests.get(path, headers=headers, timeout=60)
    assert svg.status_code == 200 and svg.headers["content-type"] == "image/svg+xml" and b"<svg" in svg.content
    drawn = requests.get(path, params={"format": "json"}, headers=headers, timeout=60)
    assert len(drawn.json()["nodes"]) == int(drawn.headers["x-custody-nodes"]) == int(svg.headers["x-custody-nodes"])
    assert int(drawn.headers["x-custody-edges"]) == len(drawn.json()["edges"]) > 0
    columns = requests.get(path, params={"format": "dot", "column": "amount"}, headers=headers, timeout=60)
    assert columns.headers["content-type"].startswith("text/vnd.graphviz") and "digraph" in columns.text
    big = requests.get(path, params={"max_nodes": 1}, headers=headers, timeout=60)
    assert (big.status_code, big.json()["detail"]) == (
        400,
        (
            f"the {drawn.json()['title']} has {drawn.headers['x-custody-nodes']} nodes, more than max_nodes 1: "
            "draw fewer levels with depth, or raise max_nodes"
        ),
    )


def test_an_admin_purges_and_anyone_else_is_refused_both_recorded(api, catalog):
    refused = requests.post(f"{api}/purge", json={}, headers=token(api, "bob"), timeout=60)
    assert (refused.status_code, refused.json()["detail"]) == (
        403,
        "bob may not purge: it needs the admin group custody-admins",
    )
    alice = token(api, "alice")
    wanted = {"versions": ["sales/clients@1"], "dry_run": True}
    dry = requests.post(f"{api}/purge", json=wanted, headers=alice, timeout=60).json()
    assert ([c["ref"] for c in dry["purged"]], dry["dry_run"]) == (["sales/clients@1"], True)
    [kept] = requests.get(f"{api}/assets/sales/clients/versions", headers=alice, timeout=30).json()
    assert kept["status"] == "committed"
    done = requests.post(f"{api}/purge", json={}, headers=alice, timeout=60)
    assert done.status_code == 200 and done.json()["purged"] == []
    decided = [(e["result"], e["channel"], e["versions"]) for e in entries(catalog, "purge", "alice")]
    assert decided == [("allowed", "api", "by retention")]
    assert [e["result"] for e in entries(catalog, "purge", "bob")] == ["denied"]


def test_bad_requests_get_one_clear_message_each(api):
    headers = token(api, "carol")
    for path, status, said in (
        ("/nothing/here", 404, "the API has no /api/v1/nothing/here: /api/docs lists what it has"),
        ("/assets/sales/nope", 404, "unknown asset sales/nope: the catalog has no spec and no version of it"),
        ("/versions/sales/clients/1/sideways", 400, "path direction: Input should be 'provenance' or 'impact'"),
        ("/assets/sales/clients/versions?limit=0", 400, "query limit: Input should be greater than or equal to 1"),
        ("/assets/sales/nope/versions", 404, "unknown asset sales/nope: no version and no spec registered"),
        ("/assets/sa$les/clients/versions", 400, "invalid domain 'sa$les': use 1 to 63 characters"),
        ("/access/sales/nope", 404, "unknown asset sales/nope: no spec declares it"),
    ):
        answer = requests.get(f"{api}{path}", headers=headers, timeout=30)
        assert answer.status_code == status, (path, answer.text)
        assert answer.json()["detail"].startswith(said), (path, answer.text)
    for method, path, body, status, said in (
        (
            "PUT",
            "/access/sales/clients/boss",
            {"user": "eve"},
            400,
            "unknown role 'boss': use owner, producer or consumer",
        ),
        ("PUT", "/access/sales/clients/consumer", {"user": "*)(uid=*"}, 400, "invalid user name '*)(uid=*'"),
        ("PUT", "/versions/sales/clients/1/status", {"status": "vital"}, 400, "body status: Input should be"),
    ):
        answer = requests.request(method, f"{api}{path}", json=body, headers=token(api, "alice"), timeout=30)
        assert (answer.status_code, answer.json()["detail"][: len(said)]) == (status, said), answer.text
    huge = requests.post(
        f"{api}/tokens", data=b"x" * (5 * 1024 * 1024), headers={"Content-Type": "application/json"}, timeout=60
    )
    assert huge.status_code == 413


# Numbers past the largest the catalog keeps on every database (PostgreSQL's INTEGER, 2147483647):
# one past it, the largest SQLite keeps plus one, and one no integer column keeps.
PAST = (2**31, 2**63, 10**23 - 1)


def test_a_version_number_past_what_the_catalog_keeps_is_no_version_on_every_path_that_names_one(api, catalog):
    alice = token(api, "alice")
    before = len(entries(catalog, "status", "alice"))
    for number in PAST:
        said = f"no version sales/clients@{number}: a version is numbered from 1 to 2147483647"
        for method, path, body in (
            ("GET", "provenance", None),
            ("GET", "impact", None),
            ("GET", "columns", None),
            ("GET", "columns/name", None),
            ("GET", "graph", None),
            ("PUT", "status", {"status": "critical"}),
        ):
            url = f"{api}/versions/sales/clients/{number}/{path}"
            answer = requests.request(method, url, json=body, headers=alice, timeout=30)
            assert (answer.status_code, answer.json()) == (404, {"detail": said}), (method, url)
    assert len(entries(catalog, "status", "alice")) == before


def test_a_query_number_past_what_the_catalog_keeps_is_a_bad_parameter_and_nothing_is_decided(api, catalog):
    dave = token(api, "dave")
    before = len(entries(catalog, "ledger.read", "dave")), len(entries(catalog, "read", "dave"))
    for path, name in (
        ("/assets/sales/clients/versions", "before"),
        ("/assets/sales/clients/rows", "version"),
        ("/ledger", "version"),
        ("/ledger", "from_seq"),
    ):
        for number in PAST:
            answer = requests.get(f"{api}{path}", params={name: number}, headers=dave, timeout=30)
            assert (answer.status_code, answer.json()) == (
                400,
                {"detail": f"query {name}: Input should be less than or equal to 2147483647"},
            ), (path, name, number)
    assert (len(entries(catalog, "ledger.read", "dave")), len(entries(catalog, "read", "dave"))) == before


def test_a_client_of_the_service_naming_a_version_past_what_the_catalog_keeps_is_told_in_one_line(api, tmp_path):
    assert client(api, tmp_path, "login", "carol", "--password-stdin", stdin="carol-demo\n").returncode == 0
    ref = "sales/clients@99999999999999999999999"
    for args in (["provenance", ref], ["impact", ref], ["lineage", "columns", ref], ["read", ref]):
        done = client(api, tmp_path, *args)
        assert (done.returncode, done.stdout, done.stderr) == (
            4,
            "",
            f"error: no version {ref}: a version is numbered from 1 to 2147483647\n",
        ), args


def test_a_revoked_token_is_refused_everywhere(api, catalog):
    headers = token(api, "carol")
    assert requests.delete(f"{api}/tokens/current", headers=headers, timeout=30).status_code == 204
    answer = requests.get(f"{api}/whoami", headers=headers, timeout=30)
    assert (answer.status_code, answer.json()["detail"]) == (401, "this token has ended: sign in again")
    assert entries(catalog, "session.ended", "carol")[-1]["channel"] == "api"


def test_a_token_ended_by_another_process_works_here_until_its_recheck_seconds_pass(catalog):
    settings = SessionSettings(b"k" * 32, timedelta(hours=1), timedelta(hours=1), recheck=timedelta(seconds=1))
    here, elsewhere = Sessions(catalog, settings, "token"), Sessions(catalog, settings, "token")
    principal, signed = here.open(new_session_id(), "carol", "password")
    assert here.find(signed) == elsewhere.find(signed) == principal
    elsewhere.end(principal)
    with pytest.raises(NotSignedIn, match="has ended"):
        elsewhere.find(signed)
    assert here.find(signed) == principal  # as this process read it a moment ago
    time.sleep(1.1)
    with pytest.raises(NotSignedIn, match="has ended"):
        here.find(signed)


def test_a_token_whose_signature_was_checked_before_still_ends_at_its_age(catalog):
    tokens = Sessions(catalog, SessionSettings(b"k" * 32, timedelta(hours=1), timedelta(seconds=1)), "token")
    principal, signed = tokens.open(new_session_id(), "carol", "password")
    assert tokens.find(signed) == principal
    time.sleep(2.1)  # the signature's time is kept to the second
    with pytest.raises(NotSignedIn, match="expired"):
        tokens.find(signed)


def test_a_sign_in_removes_the_rows_of_sessions_that_expired_over_a_day_ago(catalog):
    tokens = Sessions(catalog, SessionSettings(b"k" * 32, timedelta(hours=1), timedelta(hours=1)), "token")
    long_gone, lately = (tokens.open(new_session_id(), "carol", "password")[0] for _ in range(2))
    with catalog.session() as session:
        for principal, ago in ((long_gone, timedelta(days=1, minutes=1)), (lately, timedelta(hours=23))):
            row = session.get(ServiceSession, principal.session)
            row.expires_at = datetime.now(UTC) - ago
            session.add(row)
    tokens.open(new_session_id(), "dave", "password")
    with catalog.reading() as session:
        assert session.get(ServiceSession, long_gone.session) is None
        assert session.get(ServiceSession, lately.session) is not None


def test_several_workers_answer_the_api_and_honour_the_tokens_each_other_issues_and_ends(home, specs):
    secret = {"CUSTODY_SESSION_SECRET": "a key the workers share, 32 bytes", "CUSTODY_SESSION_RECHECK_SECONDS": "1"}
    server, port = start_service(Settings.under(home), {**environ(home, specs), **secret}, ui=False, args=WORKERS)
    try:
        api = f"http://127.0.0.1:{port}/api/v1"
        first, second = workers_of(server)
        waiting_for_requests(first, second)
        # A stopped worker accepts no connection: the other answers every request, for a moment
        # (shorter than the supervisor's health check, which would replace a worker that seems hung).
        with stopped(first):
            headers = token(api, "carol")  # issued by the second, which then takes it as valid
            assert requests.get(f"{api}/whoami", headers=headers, timeout=30).status_code == 200
        with stopped(second):
            assert requests.get(f"{api}/whoami", headers=headers, timeout=30).status_code == 200
            assert requests.delete(f"{api}/tokens/current", headers=headers, timeout=30).status_code == 204
        with stopped(first):
            time.sleep(1.2)  # past its recheck seconds, the second reads the token's row again
            assert requests.get(f"{api}/whoami", headers=headers, timeout=30).status_code == 401
    finally:
        stop(server)


@contextmanager
def stopped(pid: int) -> Iterator[None]:
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def waiting_for_requests(*workers: int, seconds: float = 120) -> None:
    """Until each worker has imported the service and waits in its event loop: one still starting
    would keep a request waiting while the other is stopped, past the supervisor's health check."""
    deadline = time.monotonic() + seconds
    while not all(Path(f"/proc/{pid}/wchan").read_text() == "do_epoll_wait" for pid in workers):
        assert time.monotonic() < deadline, "the workers did not start"
        time.sleep(0.2)


def workers_of(server) -> list[int]:
    """The worker processes a service started: its children that run Python's spawned processes."""
    children = Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()
    return [int(child) for child in children if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()]


def test_the_openapi_schema_documents_every_endpoint(api):
    schema = requests.get(api.replace("/v1", "/openapi.json"), timeout=30).json()
    assert set(schema["paths"]) == {
        "/api/v1/tokens",
        "/api/v1/tokens/current",
        "/api/v1/oauth/tokens",
        "/api/v1/whoami",
        "/api/v1/catalog",
        "/api/v1/assets/{domain}/{name}",
        "/api/v1/assets/{domain}/{name}/versions",
        "/api/v1/assets/{domain}/{name}/rows",
        "/api/v1/versions/{domain}/{name}/{number}/{direction}",
        "/api/v1/versions/{domain}/{name}/{number}/readers",
        "/api/v1/ledger",
        "/api/v1/access/{domain}/{name}",
        "/api/v1/access/{domain}/{name}/explain",
        "/api/v1/access/{domain}/{name}/{role}",
        "/api/v1/access/{domain}/{name}/{role}/{user}",
        "/api/v1/versions/{domain}/{name}/{number}/status",
        "/api/v1/specs/edits",
        "/api/v1/specs/apply",
        "/api/v1/specs/{domain}/{name}/history",
        "/api/v1/settings",
        "/api/v1/settings/{key}",
        "/api/v1/tables",
        "/api/v1/versions/{domain}/{name}/{number}/columns",
        "/api/v1/versions/{domain}/{name}/{number}/columns/{column}",
        "/api/v1/versions/{domain}/{name}/{number}/graph",
        "/api/v1/purge",
        "/api/v1/runs",
        "/api/v1/runs/{run_id}",
        "/api/v1/lineage",
        "/api/v1/lineage/runs",
        "/api/v1/lineage/runs/{run_id}",
        "/api/v1/lineage/jobs",
        "/api/v1/lineage/datasets",
        "/api/v1/streams/credentials",
    }


def test_a_client_without_credentials_reads_as_a_consumer_and_an_auditor_through_the_service(api, tmp_path):
    login = client(api, tmp_path, "login", "carol", "--password-stdin", stdin="carol-demo\n")
    assert login.returncode == 0, login.stderr
    assert (
        login.stdout.startswith("logged in to http://127.0.0.1:")
        and "as carol (password) for 60 minutes" in login.stdout
    )
    kept = tmp_path / "config" / "custody" / "tokens.json"
    assert kept.stat().st_mode & 0o777 == 0o600
    listed = client(api, tmp_path, "catalog", "--json")
    assert [e["key"] for e in json.loads(listed.stdout)][:1] == ["sales/clients"], listed.stderr
    assert "sales/names_and_products" in client(api, tmp_path, "catalog").stdout
    versions = client(api, tmp_path, "versions", "sales/clients")
    assert versions.returncode == 0 and "bob" in versions.stdout, versions.stderr
    tree = client(api, tmp_path, "provenance", "sales/names_and_products@1")
    assert tree.returncode == 0 and "sales/products@1" in tree.stdout, tree.stderr
    begins = client(api, tmp_path, "lineage", "columns", "sales/names_and_products@1", "product_name", "--origins")
    assert begins.returncode == 0 and "DropZone field product_name" in begins.stdout, begins.stderr
    drawn = client(api, tmp_path, "lineage", "graph", "sales/names_and_products@1", "-o", "lineage.svg")
    assert drawn.returncode == 0 and "wrote lineage.svg (svg, " in drawn.stderr, drawn.stderr
    assert b"<svg" in (tmp_path / "lineage.svg").read_bytes()
    rows = json.loads(client(api, tmp_path, "read", "sales/products", "--as", "carol", "--limit", "3", "--json").stdout)
    assert rows["version"] == "sales/products@1" and len(rows["rows"]) == 3
    other = client(api, tmp_path, "read", "sales/products", "--as", "bob")
    assert other.returncode != 0 and "--as names bob, but the token" in other.stderr
    refused = client(api, tmp_path, "ledger", "show")
    assert refused.returncode == 3 and "carol may not read the ledger" in refused.stderr
    assert client(api, tmp_path, "login", "dave", "--password-stdin", stdin="dave-demo\n").returncode == 0
    shown = client(api, tmp_path, "ledger", "show", "--action", "ingestion.committed")
    assert shown.returncode == 0 and "ingestion.committed" in shown.stdout and "sales/clients" in shown.stdout, (
        shown.stderr
    )
    assert client(api, tmp_path, "logout").returncode == 0
    after = client(api, tmp_path, "catalog")
    assert after.returncode == 3 and "custody login" in after.stderr
    assert not (tmp_path / "empty-home").exists()


# `custody ARGS` as the script runs it, saying on its last line of stderr which of these it loaded.
HEAVY = ("sqlalchemy", "sqlmodel", "pyarrow", "pyspark", "dagster")
REPORTING = (
    "import atexit, json, sys\n"
    f"atexit.register(lambda: print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]), file=sys.stderr))\n"
    "sys.argv[0] = 'custody'\n"
    "from governance.command import main\n"
    "main()\n"
)
REPORTING_CUSTODY = (sys.executable, "-c", REPORTING)


def test_a_client_of_the_service_reads_the_catalog_versions_lineage_and_ledger_loading_no_database_library(
    api, tmp_path
):
    assert client(api, tmp_path, "login", "dave", "--password-stdin", stdin="dave-demo\n").returncode == 0
    for args in (
        ["catalog", "--json"],
        ["catalog"],
        ["versions", "sales/clients"],
        ["provenance", "sales/names_and_products@1"],
        ["impact", "sales/clients@1", "--json"],
        ["ledger", "show", "--action", "ingestion.committed"],
        ["ledger", "show", "--limit", "3", "--json"],
    ):
        done = client(api, tmp_path, *args, command=REPORTING_CUSTODY)
        assert done.returncode == 0 and done.stdout.strip(), (args, done.stderr)
        assert json.loads(done.stderr.splitlines()[-1]) == [], (args, done.stderr)
    listed = client(api, tmp_path, "versions", "sales/clients", command=REPORTING_CUSTODY)
    assert "Versions of sales/clients" in listed.stdout and "bob" in listed.stdout, listed.stdout
    before_the_first = client(api, tmp_path, "versions", "sales/clients", "--before", "1")
    assert before_the_first.stdout.splitlines()[-1] == "no versions on this page, of 1", before_the_first.stdout
    shown = client(api, tmp_path, "ledger", "show", "--action", "ingestion.committed", command=REPORTING_CUSTODY)
    assert "bob (verified)" in shown.stdout and "sales/clients@1" in shown.stdout, shown.stdout


def test_a_client_of_the_service_shows_settings_tables_specs_access_and_purges_loading_no_database_library(
    api, tmp_path
):
    assert client(api, tmp_path, "login", "dave", "--password-stdin", stdin="dave-demo\n").returncode == 0
    for args in (
        ["settings", "show"],
        ["tables", "list"],
        ["specs", "diff"],
        ["access", "show", "sales/products"],
        ["access", "check", "sales/products", "--json"],
        ["purge", "--dry-run"],
    ):
        done = client(api, tmp_path, *args, command=REPORTING_CUSTODY)
        assert done.returncode == 0 and done.stdout.strip(), (args, done.stderr)
        assert json.loads(done.stderr.splitlines()[-1]) == [], (args, done.stderr)
    # The demo's specs were never applied here: the service's answer is a refusal, all the same.
    history = client(api, tmp_path, "specs", "history", "sales/clients", command=REPORTING_CUSTODY)
    assert history.returncode == 4 and "no spec of sales/clients was ever applied" in history.stderr, history.stderr
    assert json.loads(history.stderr.splitlines()[-1]) == []


def test_a_client_of_the_service_shows_the_pinned_settings_and_the_tables_as_the_catalog_holds_them(
    api, tmp_path, catalog, home, specs
):
    assert client(api, tmp_path, "login", "carol", "--password-stdin", stdin="carol-demo\n").returncode == 0
    pinned = pinned_settings(catalog, Settings.from_env(environ(home, specs)), {}, refuse=False).pinned
    shown = json.loads(client(api, tmp_path, "settings", "show", "--json").stdout)
    assert shown == {"settings": {key: asdict(value) for key, value in pinned.items()}, "disagreements": []}
    table = client(api, tmp_path, "settings", "show").stdout
    assert "auditor_group" in table and pinned["auditor_group"].value in table
    listed = {entry["asset"]: entry for entry in json.loads(client(api, tmp_path, "tables", "list", "--json").stdout)}
    assert listed["sales/clients"] == {
        "asset": "sales/clients",
        "table": "custody.sales.clients",
        "versions": [1],
        "tags": ["custody-v1"],
        "current": "custody-v1",
        "problem": None,
    }
    assert "custody.sales.names_and_products" in client(api, tmp_path, "tables", "list").stdout


def test_an_admin_changes_a_policy_setting_through_the_service_and_anyone_else_is_refused_both_recorded(
    api, tmp_path, catalog
):
    assert client(api, tmp_path, "login", "carol", "--password-stdin", stdin="carol-demo\n").returncode == 0
    refused = client(api, tmp_path, "settings", "set", "auditor_group", "sales-owners")
    assert refused.returncode == 3 and "carol may not change the policy settings" in refused.stderr, refused.stderr
    [denied] = entries(catalog, "settings", "carol")[-1:]
    assert (denied["result"], denied["channel"], denied["setting"]) == ("denied", "api", "auditor_group")
    assert denied["session"] and denied["method"] == "password"
    assert client(api, tmp_path, "login", "alice", "--password-stdin", stdin="alice-demo\n").returncode == 0
    changed = client(api, tmp_path, "settings", "set", "auditor_group", "sales-owners")
    try:
        assert changed.returncode == 0, changed.stderr
        assert changed.stdout.strip() == "auditor_group: auditors -> sales-owners (by alice)"
    finally:
        back = client(api, tmp_path, "settings", "set", "auditor_group", "auditors", "--json")
    assert json.loads(back.stdout) == {
        "key": "auditor_group",
        "before": "sales-owners",
        "after": "auditors",
        "by": "alice",
        "changed": True,
    }
    allowed = entries(catalog, "settings", "alice")[-2:]
    assert [(e["result"], e["channel"], e["to"]) for e in allowed] == [
        ("allowed", "api", "sales-owners"),
        ("allowed", "api", "auditors"),
    ]
    assert [e["to"] for e in entries(catalog, "settings.changed", "alice")[-2:]] == ["sales-owners", "auditors"]


def test_an_admin_may_not_move_the_service_s_directory_through_it(api, tmp_path, catalog):
    assert client(api, tmp_path, "login", "alice", "--password-stdin", stdin="alice-demo\n").returncode == 0
    refused = client(api, tmp_path, "settings", "set", "ldap_base_dn", "dc=example,dc=com")
    assert refused.returncode == 3, refused.stderr
    assert (
        "alice may not change ldap_base_dn through the service: the directory is chosen on the service's host"
        in refused.stderr
    )
    [denied] = entries(catalog, "settings", "alice")[-1:]
    assert (denied["result"], denied["channel"], denied["setting"]) == ("denied", "api", "ldap_base_dn")
    assert (
        json.loads(client(api, tmp_path, "settings", "show", "--json").stdout)["settings"]["ldap_base_dn"]["value"]
        == ""
    )


def test_a_client_without_credentials_changes_roles_and_status_as_an_owner_through_the_service(api, tmp_path, catalog):
    assert client(api, tmp_path, "login", "alice", "--password-stdin", stdin="alice-demo\n").returncode == 0
    before = {action: len(entries(catalog, action, "alice")) for action in ("member.added", "member.removed")}
    shown = client(api, tmp_path, "access", "show", "sales/products")
    assert shown.returncode == 0 and "sales-consumers" in shown.stdout and "carol" in shown.stdout, shown.stderr
    explained = json.loads(client(api, tmp_path, "access", "check", "sales/products", "--as", "eve", "--json").stdout)
    assert {d["action"]: d["result"] for d in explained["decisions"]}["read"] == "denied"
    granted = client(api, tmp_path, "access", "grant", "consumer", "sales/products", "eve")
    assert granted.returncode == 0 and "eve added to sales-consumers" in granted.stdout, granted.stderr
    revoked = client(api, tmp_path, "access", "revoke", "consumer", "sales/products", "eve", "--by", "alice")
    assert revoked.returncode == 0 and "eve removed from sales-consumers" in revoked.stdout, revoked.stderr
    other = client(api, tmp_path, "access", "grant", "consumer", "sales/products", "eve", "--by", "bob")
    assert other.returncode == 1 and "--by names bob, but the token" in other.stderr
    marked = client(api, tmp_path, "status", "sales/products@1", "critical")
    assert marked.returncode == 0 and "sales/products@1: normal -> critical" in marked.stdout, marked.stderr
    assert client(api, tmp_path, "status", "sales/products@1", "normal").returncode == 0
    purged = client(api, tmp_path, "purge", "--dry-run")
    assert purged.returncode == 0 and "nothing to purge" in purged.stdout, purged.stderr
    for action, count in before.items():
        [change] = entries(catalog, action, "alice")[count:]
        assert (change["user"], change["group"], change["changed"]) == ("eve", "sales-consumers", True)
    assert not (tmp_path / "empty-home").exists()


def test_python_s_custody_goes_through_the_service_knowing_only_its_address(api, monkeypatch, tmp_path):
    for name in [name for name in os.environ if name.startswith(("CUSTODY_", "DAGSTER_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("CUSTODY_URL", api.removesuffix("/api/v1"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("CUSTODY_HOME", str(tmp_path / "empty-home"))
    custody = Custody.from_env()
    assert isinstance(custody, RemoteCustody)
    assert custody.login("dave", demo_password("dave")) == "dave" == custody.whoami()
    assert list(custody.catalog(domain="sales")["key"]) == [
        "sales/clients",
        "sales/names_and_products",
        "sales/products",
    ]
    card = custody.asset("sales/clients")
    assert "surname" in list(card.columns["name"]) and list(card.versions["number"]) == [1]
    assert list(custody.versions("sales/clients")["requested_by"]) == ["bob"]
    drawn = custody.provenance("sales/names_and_products@1")
    assert {"sales/clients@1", "sales/products@1", "sales/names_and_products@1"} <= set(drawn.nodes)
    assert len(custody.columns("sales/names_and_products@1", "amount")) > 1
    assert list(custody.ledger(action="ingestion.committed")["actor"]) == ["bob", "bob"]
    assert set(custody.access("sales/clients")["role"]) == {"owner", "producer", "consumer"}
    custody.login("carol", demo_password("carol"))
    assert custody.read("sales/products").num_rows == 4
    assert custody.read("sales/products", limit=2, columns=["product_name"]).column_names == ["product_name"]
    with pytest.raises(InvalidInput, match="as_user names bob, but the token"):
        custody.read("sales/products", as_user="bob")
    with pytest.raises(AccessDenied, match="carol may not read the ledger"):
        custody.ledger()
    assert not (tmp_path / "empty-home").exists()


def test_a_kept_answer_asked_for_past_half_its_time_is_renewed_after_it_is_sent(api, catalog):
    headers = token(api, "carol")
    url = f"{api}/catalog?domain=sales&search=products"

    def label() -> str | None:
        listed = requests.get(url, headers=headers, timeout=30).json()
        return next(entry["newest"]["label"] for entry in listed if entry["key"] == "sales/products")

    before = label()  # computed, and kept 2 seconds from now at the least
    asked = time.monotonic()
    relabel(catalog, "renewed")
    try:
        time.sleep(1.2)
        assert label() == before  # kept, and renewed once sent
        while label() != "renewed":
            assert time.monotonic() - asked < 1.9, "the answer was not renewed before it expired"
            time.sleep(0.05)
    finally:
        relabel(catalog, before)


def relabel(catalog: Catalog, label: str | None) -> None:
    """Give sales/products@1 another label, as the catalog lists it."""
    with catalog.session() as session:
        session.connection().exec_driver_sql(
            "UPDATE version SET label = ? WHERE asset_key = 'sales/products' AND number = 1", (label,)
        )


def test_past_its_most_answers_the_oldest_kept_one_is_dropped():
    kept = Recent(seconds=60, most=2)
    for page in ("first", "second", "third"):
        kept.keep(page, page.encode())

    assert [kept.fresh(page) for page in ("first", "second", "third")] == [None, b"second", b"third"]


def test_a_kept_answer_past_half_its_time_is_renewed_once_and_given_until_then():
    answers = iter([b"first", b"second"])
    kept = Recent(seconds=1)
    kept.answer("catalog", lambda: next(answers))
    assert not kept.renewal_due("catalog")
    time.sleep(0.6)
    assert kept.renewal_due("catalog") and not kept.renewal_due("catalog")  # one renews it
    assert kept.fresh("catalog") == b"first"
    kept.renew("catalog", lambda: next(answers))
    assert kept.fresh("catalog") == b"second" and not kept.renewal_due("catalog")


def test_a_renewal_that_fails_leaves_the_kept_answer_to_expire_and_the_next_request_is_told_why():
    def unreachable() -> bytes:
        raise CatalogUnavailable("the catalog at sqlite:///x cannot be reached")

    kept = Recent(seconds=1)
    kept.answer("catalog", lambda: b"first")
    time.sleep(0.6)
    assert kept.renewal_due("catalog")
    kept.renew("catalog", unreachable)
    assert kept.fresh("catalog") == b"first" and kept.renewal_due("catalog")
    time.sleep(0.5)
    with pytest.raises(CatalogUnavailable, match="cannot be reached"):
        kept.answer("catalog", unreachable)


def test_the_api_alone_answers_on_four_threads_the_ui_on_starlette_s_forty_and_what_started_is_frozen(home):
    assert api_threads({}, ui=False) == 4
    assert api_threads({}, ui=True) is None
    assert api_threads({"CUSTODY_SERVICE_THREADS": "16"}, ui=True) == 16
    service = create_app(Custody(Settings.under(home)), SessionSettings.from_environ({}), threads=3)

    app = service.app.app  # behind the bound on bodies and the lineage endpoint's express path

    async def threads_once_started() -> float:
        async with app.router.lifespan_context(app):
            return to_thread.current_default_thread_limiter().total_tokens

    try:
        assert anyio.run(threads_once_started) == 3
        assert gc.get_freeze_count() > 0  # what it started with, out of the collector's way
    finally:
        gc.unfreeze()


def test_the_service_walks_lineage_over_the_edges_it_holds_in_memory_once_started(tmp_path):
    custody = Custody(Settings.under(tmp_path / "home"))
    app = create_app(custody, SessionSettings.from_environ({})).app.app

    def kept() -> bool:
        with custody.store.reading() as session:
            return resident(session) is not None

    async def kept_once_started() -> bool:
        async with app.router.lifespan_context(app):
            return kept()

    assert not kept()
    try:
        assert anyio.run(kept_once_started)
    finally:
        gc.unfreeze()


def lineage_loaded() -> None:
    """Wait for the thread that loads the lineage a service holds, if it is still running."""
    for thread in threading.enumerate():
        if thread.name == "custody-lineage-load":
            thread.join()


def test_the_service_reads_the_lineage_it_holds_as_it_starts_not_at_its_first_walk(tmp_path):
    custody = Custody(Settings.under(tmp_path / "home"))
    [source] = add_versions(custody.store, "raw/source", 1)
    add_versions(custody.store, "clean/derived", 3, inputs=(source,))
    app = create_app(custody, SessionSettings.from_environ({})).app.app

    def held_top() -> int | None:
        with custody.store.reading() as session:
            held = resident(session)
            return held.top if held is not None else None

    async def held_once_loaded() -> int | None:
        async with app.router.lifespan_context(app):
            lineage_loaded()
            return held_top()

    assert held_top() is None
    try:
        top = anyio.run(held_once_loaded)
    finally:
        gc.unfreeze()
    with custody.store.reading() as session:
        newest_edge = session.exec(select(func.max(LineageEdge.id))).one()
    assert newest_edge == 3 and top == newest_edge  # no walk has run: the start read every edge


def test_a_service_that_cannot_read_the_lineage_as_it_starts_says_so_and_serves(tmp_path, capsys):
    custody = Custody(Settings.under(tmp_path / "home"))
    with custody.store.session() as session:  # a catalog whose lineage table is gone
        session.execute(text(f"DROP TABLE {LineageEdge.__tablename__}"))
    app = create_app(custody, SessionSettings.from_environ({})).app.app

    async def started() -> bool:
        async with app.router.lifespan_context(app):
            lineage_loaded()
            return True

    try:
        assert anyio.run(started)
    finally:
        gc.unfreeze()
    [warning] = [line for line in capsys.readouterr().err.splitlines() if "lineage" in line]
    assert warning.startswith("warning: the lineage was not loaded as the service started (")
    assert "lineage_edge" in warning and warning.endswith("; its first walk loads it")


def test_an_answer_every_user_gets_alike_is_kept_for_its_seconds_and_computed_once_for_those_who_ask_at_once():
    computed = []

    def compute() -> bytes:
        computed.append(1)
        time.sleep(0.2)
        return b"answer"

    kept = Recent(seconds=1)
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(lambda _: kept.answer("catalog", compute), range(4))) == [b"answer"] * 4
    assert len(computed) == 1
    time.sleep(1.1)
    kept.answer("catalog", compute)
    assert len(computed) == 2
    never = Recent(seconds=0)
    for _ in range(2):
        never.answer("catalog", compute)
    assert len(computed) == 4
