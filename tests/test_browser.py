"""What a person sees and does in the Dagster UI, in a real browser: Debian's Chromium, driven by Selenium.

A failed test leaves a screenshot of the page it was on in `.test-artifacts/` at the root of the checkout.

The tests share one service and Dagster's daemon, on a home with the demo's first versions: the one
test that makes a version makes it of sales/product_summary, whose versions no other test reads, and
each test reads only the runs it launched. The owners' test has a service of its own, on edited specs.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator

import dagster as dg
import pytest
from selenium import webdriver
from selenium.common.exceptions import (
    ElementClickInterceptedException,
    StaleElementReferenceException,
    TimeoutException,
)
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ready
from selenium.webdriver.support.ui import WebDriverWait

from assets.launch import instance_for
from governance.cli import run
from governance.config import Settings
from governance.demo import demo_password, drop_demo_batches
from governance.zones import Lake
from tests.conftest import ROOT
from tests.dagster_servers import Served, Shared, finished, shared_service
from tests.helpers import edit_spec, run_proven

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
ARTIFACTS = ROOT / ".test-artifacts"
# Headless, and quiet on the network: this machine reaches no host but its own.
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1600,2400",
)
WAIT_SECONDS = 60
MENU_SECONDS = 5


class Page:
    """The browser on the UI of one webserver, with waits for what React renders late."""

    def __init__(self, driver: WebDriver, port: int):
        self.driver, self.port = driver, port
        self.wait = WebDriverWait(driver, WAIT_SECONDS)
        self.community_asked = False
        # For what React may redraw, or the next page replace, between finding an element and using it: find it again.
        self.redrawn = WebDriverWait(driver, WAIT_SECONDS, ignored_exceptions=(StaleElementReferenceException,))

    def sign_in(self, user: str, password: str, then: str = "/") -> None:
        """Sign in at the login page, as a person does, asking for `then`."""
        self.driver.get(f"http://127.0.0.1:{self.port}/login?next={then}")
        self.wait.until(ready.visibility_of_element_located((By.ID, "user"))).send_keys(user)
        self.driver.find_element(By.ID, "password").send_keys(password)
        self.driver.find_element(By.XPATH, "//button[normalize-space()='Sign in']").click()

    def open(self, path: str) -> None:
        """An asset page, once its Materialize button is there."""
        self.visit(path, lambda d: d.find_elements(By.XPATH, "//button[normalize-space()='Materialize']"))

    def visit(self, path: str, loaded: Callable[[WebDriver], object]) -> None:
        self.driver.get(f"http://127.0.0.1:{self.port}{path}")
        self.wait.until(loaded)
        self._dismiss_newsletter()

    def _dismiss_newsletter(self) -> None:
        """Dagster asks a new browser once to join its community; the question covers the page. Once
        skipped, it is not asked again: no page after waits for it."""
        if self.community_asked:
            return
        try:
            WebDriverWait(self.driver, 5).until(
                ready.element_to_be_clickable((By.XPATH, "//button[normalize-space()='Skip']"))
            ).click()
        except TimeoutException:
            return
        self.community_asked = True

    def click(self, xpath: str) -> None:
        """Click once the element is clickable; again if React redrew it between finding and clicking."""
        clickable = ready.element_to_be_clickable((By.XPATH, xpath))

        def clicked(driver: WebDriver) -> bool:
            element = clickable(driver)
            if not element:
                return False
            try:
                element.click()
            except ElementClickInterceptedException:
                # Dagster's question to a new browser came late, over the page: skip it, click again.
                self.community_asked = False
                self._dismiss_newsletter()
                return False
            return True

        self.redrawn.until(clicked)

    def choose(self, opener: str, item: str) -> None:
        """Open a menu and click one of its items; open it again if a redraw closed it first."""

        def chosen(driver: WebDriver) -> bool:
            self.click(opener)
            try:
                WebDriverWait(driver, MENU_SECONDS).until(ready.element_to_be_clickable((By.XPATH, item))).click()
            except (TimeoutException, StaleElementReferenceException):
                return False
            return True

        self.wait.until(chosen)

    def close_dialog(self, button: str) -> None:
        """Press one of the open dialog's buttons, and wait until the dialog no longer covers the page."""
        self.click(f"//div[@role='dialog']//button[normalize-space()='{button}']")
        self.wait.until(ready.invisibility_of_element_located((By.CSS_SELECTOR, "[role=dialog]")))

    def text(self) -> str:
        return self.driver.find_element(By.TAG_NAME, "body").text

    def shows(self, *texts: str) -> str:
        """Wait until the page shows every one of `texts`; the page's text."""
        try:
            self.redrawn.until(lambda _: all(text in self.text() for text in texts))
        except TimeoutException:
            missing = [text for text in texts if text not in self.text()]
            raise AssertionError(f"the page does not show {missing}") from None
        return self.text()

    def dialog(self) -> str:
        """The open dialog's text, read again if React redraws the dialog between finding and reading it."""
        shown = ready.visibility_of_element_located((By.CSS_SELECTOR, "[role=dialog]"))
        return self.redrawn.until(lambda driver: (dialog := shown(driver)) and dialog.text)


@pytest.fixture
def browser(request: pytest.FixtureRequest) -> Iterator[WebDriver]:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not shutil.which(path)]
    if missing:
        pytest.fail(
            f"the browser tests need {' and '.join(missing)}: apt-get install chromium chromium-driver "
            "(scripts/system-packages installs them)"
        )
    options = Options()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / f"{request.node.name}.png"
        driver.save_screenshot(str(shot))
        print(f"screenshot of the page at failure: {shot}")
    driver.quit()


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
    page = Page(browser, served.port)
    page.sign_in("bob", demo_password("bob"))
    page.wait.until(lambda driver: "/login" not in driver.current_url)
    return page


@pytest.fixture
def ui(browser: WebDriver, joined: Shared) -> Page:
    return signed_in_as_bob(browser, joined.served)


def until(condition: Callable[[], object], what: str, seconds: float = 120) -> object:
    deadline = time.monotonic() + seconds
    while not (found := condition()):
        assert time.monotonic() < deadline, f"{what} did not happen in {seconds:g} s"
        time.sleep(0.5)
    return found


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
    instance = instance_for(on_joined)
    before = {r.run_id for r in instance.get_runs()}
    ui.open("/assets/sales/product_summary")
    ui.click("//button[normalize-space()='Materialize']")
    [launched] = until(lambda: [r for r in instance.get_runs() if r.run_id not in before], "a run of Materialize")
    done = finished(instance, launched.run_id, joined.daemon)
    assert done.is_success and done.tags["custody/requested_by"] == "bob"
    ui.open("/assets/sales/product_summary")
    ui.shows("sales/product_summary@1", "verified")
    capsys.readouterr()
    assert run(["ledger", "show", "--run", launched.run_id, "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    [session] = [e for e in entries if e["action"] == "session"]
    assert (session["actor"], session["assurance"], session["details"]["result"]) == ("bob", "verified", "allowed")
    assert (session["details"]["channel"], session["details"]["method"]) == ("ui", "password")
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
