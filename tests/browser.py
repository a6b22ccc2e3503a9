"""A real browser on the UI: Debian's Chromium, driven by Selenium, with waits for what React renders late.

A failed test leaves a screenshot of the page it was on in `.test-artifacts/` at the root of the checkout.
"""

from __future__ import annotations

import shutil
import subprocess
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

from governance.demo import demo_password
from tests.conftest import ROOT
from tests.dagster_servers import finished
from tests.helpers import recorded

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
            shown = self.text()
            missing = [text for text in texts if text not in shown]
            raise AssertionError(
                f"the page does not show {missing}; it shows: {' | '.join(shown.splitlines())}"
            ) from None
        return self.text()

    def shows_once_loaded(self, path: str, *texts: str) -> str:
        """Open `path` again until it shows every one of `texts`: for what a page loads once, such as an
        asset's freshness, where a query that failed says so in a toast and a person loads the page again."""
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            self.open(path)
            try:
                return WebDriverWait(self.driver, MENU_SECONDS).until(
                    lambda _: all(text in self.text() for text in texts) and self.text()
                )
            except TimeoutException:
                if time.monotonic() > deadline:
                    return self.shows(*texts)

    def dialog(self) -> str:
        """The open dialog's text, read again if React redraws the dialog between finding and reading it."""
        shown = ready.visibility_of_element_located((By.CSS_SELECTOR, "[role=dialog]"))
        return self.redrawn.until(lambda driver: (dialog := shown(driver)) and dialog.text)


def chromium(request: pytest.FixtureRequest) -> Iterator[WebDriver]:
    """The browser for a test: a module's `browser` fixture yields from it."""
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


def signed_in(browser: WebDriver, port: int, user: str = "bob") -> Page:
    """The browser, signed in as `user` at the login page of the service on `port`."""
    page = Page(browser, port)
    page.sign_in(user, demo_password(user))
    page.wait.until(lambda driver: "/login" not in driver.current_url)
    return page


def until(condition: Callable[[], object], what: str, seconds: float = 120) -> object:
    deadline = time.monotonic() + seconds
    while not (found := condition()):
        assert time.monotonic() < deadline, f"{what} did not happen in {seconds:g} s"
        time.sleep(0.5)
    return found


def materialized(page: Page, asset: str, instance: dg.DagsterInstance, daemon: subprocess.Popen) -> dg.DagsterRun:
    """Press the plain Materialize on the page of `asset` (`sales/products`); its run, once it succeeded."""
    before = {r.run_id for r in instance.get_runs()}
    page.open(f"/assets/{asset}")
    page.click("//button[normalize-space()='Materialize']")
    [launched] = until(lambda: [r for r in instance.get_runs() if r.run_id not in before], "a run of Materialize")
    done = finished(instance, launched.run_id, daemon)
    assert done.is_success, done.status
    return done


def ledger_of(run_id: str) -> list[dict]:
    """The ledger's entries of a run, as `custody ledger show --json` gives them."""
    return recorded(run_id=run_id)


def launched_signed_in(entries: list[dict], user: str) -> None:
    """The run's entries say `user` launched it signed in to the UI with a password, verified."""
    [session] = [e for e in entries if e["action"] == "session"]
    assert (session["actor"], session["assurance"], session["details"]["result"]) == (user, "verified", "allowed")
    assert (session["details"]["channel"], session["details"]["method"]) == ("ui", "password")
