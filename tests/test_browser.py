"""What a person sees and does in the Dagster UI, in a real browser (tests/browser.py).

The tests share one service and Dagster's daemon, on a home with the demo's first versions: the one
test that makes a version makes it of sales/product_summary, whose versions no other test reads, and
each test reads only the runs it launched. The owners' test has a service of its own, on edited specs.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import dagster as dg
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from assets.launch import instance_for
from governance.cli import run
from governance.config import Settings
from governance.demo import demo_password, drop_demo_batches
from governance.zones import Lake
from tests.browser import Page, chromium, launched_signed_in, ledger_of, materialized, signed_in, until
from tests.conftest import ROOT
from tests.dagster_servers import Guesser, Served, Shared, SignedIn, finished, shared_service
from tests.helpers import edit_spec, run_proven


@pytest.fixture
def browser(request: pytest.FixtureRequest) -> Iterator[WebDriver]:
    yield from chromium(request)


@pytest.fixture(scope="module")
def joined(tmp_path_factory: pytest.TempPathFactory, spark) -> Iterator[Shared]:
    """products@1 and clients@1 ingested, names_and_products@1 materialized, by bob through the CLI;
    the service and Dagster's daemon on them."""
    with shared_service(tmp_path_factory.mktemp("browser") / "home", daemon=True) as shared:
        with pytest.MonkeyPatch.context() as monkeypatch:
            drop_demo_batches(Lake(shared.for_cli(monkeypatch).lake))
            for args in (
                ["ingest", "sales/products"],
                ["ingest", "sales/clients"],
                ["materialize", "key:sales/names_and_products"],
            ):
                assert run_proven([*args, "--as", "bob"]) == 0
        yield shared


@pytest.fixture
def on_joined(joined: Shared, monkeypatch: pytest.MonkeyPatch) -> Settings:
    return joined.for_cli(monkeypatch)


def signed_in_as_bob(browser: WebDriver, served: Served) -> Page:
    """The browser, signed in as bob (a producer of sales) at the login page."""
    return signed_in(browser, served.port)


@pytest.fixture
def ui(browser: WebDriver, joined: Shared) -> Page:
    return signed_in_as_bob(browser, joined.served)


def test_an_asset_page_shows_its_governance_columns_and_column_lineage(ui):
    ui.open("/assets/sales/names_and_products")
    page = ui.shows(
        "sales-owners",
        "Parquet",
        "Spark",
        "custody/zone: integration",
        "custody/classification: confidential",
        "Columns",
        "product_name",
        "unit_price",
        "custody/version",
        "sales/names_and_products@1",
    )
    assert "Each client order joined with the product it names." in page
    ui.shows(
        "custody/column_lineage",
        "derives from",
        "sales/products@1.unit_price",
        "DIRECT IDENTITY",
        "sales/clients@1.order__product_id",
    )


def test_the_plain_materialize_runs_for_the_signed_in_user_verified(ui, joined, on_joined, capsys):
    done = materialized(ui, "sales/product_summary", instance_for(on_joined), joined.daemon)
    assert done.tags["custody/requested_by"] == "bob"
    ui.open("/assets/sales/product_summary")
    ui.shows("sales/product_summary@1", "verified")
    entries = ledger_of(done.run_id)
    launched_signed_in(entries, "bob")
    assert {(e["actor"], e["assurance"]) for e in entries if e["action"] in ("materialize", "read")} == {
        ("bob", "verified")
    }
    assert run(["versions", "sales/product_summary", "--json"]) == 0
    newest = json.loads(capsys.readouterr().out)[-1]
    assert (newest["number"], newest["requested_by"], newest["assurance"]) == (1, "bob", "verified")


def test_a_wrong_password_stays_at_the_login_and_logout_ends_the_session(browser, joined):
    page = Page(browser, joined.served.port)
    page.sign_in("carol", "not-her-password", then="/assets")
    page.shows("Sign in to Custody", "carol: unknown user or wrong password")
    page.sign_in("carol", demo_password("carol"), then="/assets")
    page.wait.until(lambda driver: driver.current_url.endswith("/assets"))
    page.shows("names_and_products", "product_summary")
    browser.get(f"http://127.0.0.1:{joined.served.port}/logout")
    page.shows("Signed in as carol")
    page.click("//button[normalize-space()='Sign out']")
    page.shows("Sign in to Custody")
    browser.get(f"http://127.0.0.1:{joined.served.port}/assets")
    page.shows("Sign in to Custody")
    assert "/login?next=/assets" in browser.current_url


def test_a_guesser_who_keeps_guessing_keeps_no_one_out_of_the_browser_they_signed_in_from(browser, joined):
    """dave, whom no other test signs in: his browser knows him once he has signed in from it."""
    port = joined.served.port
    page = signed_in(browser, port, "dave")
    browser.get(f"http://127.0.0.1:{port}/logout")
    page.click("//button[normalize-space()='Sign out']")
    page.shows("Sign in to Custody")
    with Guesser(lambda n: SignedIn(port).sign_in("dave", f"guess-{n}")):
        stranger = SignedIn(port).sign_in("dave", demo_password("dave"))
        page.sign_in("dave", demo_password("dave"), then="/assets")
        page.wait.until(lambda driver: driver.current_url.endswith("/assets"))
    assert stranger.status_code == 401 and "too many failed logins in a row" in stranger.text
    page.shows("names_and_products", "product_summary")


def test_a_check_runs_on_demand_from_the_asset_s_checks_tab(ui, joined):
    instance = instance_for(joined.settings)
    before = {r.run_id for r in instance.get_runs()}
    ui.open("/assets/sales/names_and_products?view=checks")
    ui.shows("files_intact", "inputs_as_declared")
    ui.click("//button[normalize-space()='Execute']")
    [audit] = until(lambda: [r for r in instance.get_runs() if r.run_id not in before], "a check launched from the UI")
    assert audit.asset_selection == frozenset() or audit.asset_selection is None
    assert audit.asset_check_selection and {key.asset_key for key in audit.asset_check_selection} == {
        dg.AssetKey(["sales", "names_and_products"])
    }
    assert finished(instance, audit.run_id, joined.daemon).is_success
    ui.open("/assets/sales/names_and_products?view=checks")
    ui.shows("Passed")


@pytest.fixture
def owners_edits(cli_env, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """Approval on, no spec applied yet, and sales/product_summary broken by a key no spec has."""
    specs = tmp_path / "specs"
    shutil.copytree(ROOT / "assets" / "specs", specs)
    edit_spec(specs, "sales/product_summary", "zone: integration", "zone: integration\ncolour: blue")
    monkeypatch.setenv("CUSTODY_SPECS", str(specs))
    monkeypatch.setenv("CUSTODY_SPECS_APPROVAL", "on")


def test_owners_see_a_spec_waiting_for_approval_and_a_broken_one_with_its_problems(owners_edits, browser, webserver):
    ui = signed_in_as_bob(browser, webserver)
    ui.open("/assets/sales/products")
    ui.shows(
        "Pending approval:",
        "has no definition in force yet",
        "custody specs apply sales/products --as OWNER",
        "custody/approval: pending",
    )
    ui.visit("/assets/sales/product_summary", lambda d: "Invalid spec:" in d.find_element(By.TAG_NAME, "body").text)
    ui.shows(
        "External Asset",
        "this asset cannot run until its owner fixes it",
        "colour: unknown key",
        "custody/spec: invalid",
    )
    assert not ui.driver.find_element(By.XPATH, "//button[normalize-space()='Materialize']").is_enabled()
