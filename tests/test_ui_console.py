"""What `make ui` prints: one line for each refused or failed run, and Dagster's own lines with VERBOSE=1."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import pytest

from assets.launch import EARLIER_INSTANCE_YAMLS, INSTANCE_YAML, instance_for, run_outcome
from governance.zones import Lake
from tests.conftest import ROOT, drop
from tests.dagster_servers import SERVES, SignedIn, finished, serving
from tests.helpers import cli
from tests.test_ui import PRODUCTS_CSV, launch_answer

REFUSAL = re.compile(r" - custody - run (\S+) refused: (.*)$")
NOT_IN_FORCE = "sales/products has no definition in force yet"


class Console:
    """`make ui` on the test's home, its console written to a file."""

    def __init__(self, path: Path, process: subprocess.Popen, port: int):
        self.path, self.process, self.port = path, process, port

    def text(self) -> str:
        return self.path.read_text(encoding="utf-8")

    def lines(self) -> list[str]:
        return self.text().splitlines()

    def wait_for(self, pattern: str, seconds: float = 240) -> None:
        deadline = time.monotonic() + seconds
        while pattern not in self.text():
            assert self.process.poll() is None, f"make ui exited: {self.text()[-2000:]}"
            assert time.monotonic() < deadline, (
                f"{pattern!r} not on the console in {seconds:g} s: {self.text()[-3000:]}"
            )
            time.sleep(1)

    def stop(self) -> str:
        """Stop make and every process it started: the service outlives a make stopped first."""
        group = self.process.pid
        with suppress(ProcessLookupError):
            os.killpg(group, signal.SIGTERM)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                self.process.poll()
                os.killpg(group, 0)
                time.sleep(0.5)
            os.killpg(group, signal.SIGKILL)
        self.process.wait(timeout=30)
        return self.text()


def make_ui(tmp_path: Path, *make_args: str) -> Iterator[Console]:
    path = tmp_path / "console.txt"
    with path.open("w", encoding="utf-8") as out:
        process = subprocess.Popen(
            ["make", "--no-print-directory", "ui", "UI_ARGS=--host 127.0.0.1 --port 0", *make_args],
            cwd=ROOT,
            start_new_session=True,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    console = Console(path, process, 0)
    try:
        console.wait_for("Custody serves on http://")
        found = SERVES.search(console.text())
        assert found, console.text()
        console.port = int(found.group(1))
        serving(console.port, process, 240, console.text)
        yield console
    finally:
        console.stop()


@pytest.fixture
def ui(cli_env, folders_made_by_bob, tmp_path, monkeypatch, capsys) -> Iterator[Console]:
    """`make ui`, with approval on and only sales/names_and_products applied: the DropZone sensor's
    run of a products batch is refused when the daemon submits it."""
    monkeypatch.setenv("CUSTODY_SPECS_APPROVAL", "on")
    monkeypatch.setenv("CUSTODY_DROPZONE_SENSOR", "on")
    code, _, err = cli(capsys, "specs", "apply", "sales/names_and_products", "--as", "alice", password="alice-demo")
    assert code == 0, err
    drop(Lake(cli_env.lake), "sales/products", "from-bob", {"products.csv": PRODUCTS_CSV}, requested_by="bob")
    yield from make_ui(tmp_path)


@pytest.fixture
def verbose_ui(cli_env, tmp_path, monkeypatch) -> Iterator[Console]:
    monkeypatch.setenv("CUSTODY_DROPZONE_SENSOR", "off")
    yield from make_ui(tmp_path, "VERBOSE=1")


def failed_run(console: Console, cli_env) -> tuple[str, str]:
    """A UI run of sales/names_and_products before its inputs have versions: its step fails. Its id,
    and what its failed step said."""
    answer = launch_answer(SignedIn(console.port, "bob"), ["sales", "names_and_products"], {})
    assert answer["__typename"] == "LaunchRunSuccess", answer
    run_id = answer["run"]["runId"]
    instance = instance_for(cli_env)
    finished(instance, run_id, console.process, 300)
    [failure] = run_outcome(instance, run_id).failures
    console.wait_for(f"run {run_id} failed")
    return run_id, failure.message


def test_make_ui_says_one_line_for_each_refused_or_failed_run_and_no_stack(ui, cli_env):
    answer = launch_answer(SignedIn(ui.port, "eve"), ["sales", "names_and_products"], {})
    reason = answer["message"].removeprefix("Custody refused this run: ")
    run_id, message = failed_run(ui, cli_env)
    ui.wait_for(NOT_IN_FORCE)
    text = ui.stop()
    assert "Traceback" not in text and "Stack Trace" not in text
    [failed] = [line for line in ui.lines() if run_id in line]
    assert failed.endswith(f" - custody - run {run_id} failed: sales/names_and_products: {message}")
    refusals = [match.groups() for line in ui.lines() if (match := REFUSAL.search(line))]
    assert [why for _, why in refusals if why == reason] == [reason]
    assert {why for _, why in refusals} - {reason} and all(NOT_IN_FORCE in why for _, why in refusals if why != reason)
    assert len({refused for refused, _ in refusals}) == len(refusals)
    assert "is currently in beta" not in text


def test_make_ui_verbose_shows_dagster_s_own_lines_for_a_run(verbose_ui, cli_env):
    run_id, message = failed_run(verbose_ui, cli_env)
    # The run's worker writes Dagster's lines to the console itself, when it gets to: on a busy
    # machine, after the daemon's own line about the run.
    verbose_ui.wait_for("STEP_FAILURE")
    text = verbose_ui.stop()
    assert f"{run_id} - " in text and "STEP_FAILURE" in text and "Stack Trace" in text
    assert f" - custody - run {run_id} failed: sales/names_and_products: {message}" in text


def test_a_home_with_an_earlier_default_instance_gets_the_quiet_console_and_an_edited_one_is_kept(settings):
    home = settings.dagster_home
    instance_for(settings)
    for earlier in EARLIER_INSTANCE_YAMLS:
        (home / "dagster.yaml").write_text(earlier, encoding="utf-8")
        instance_for(settings)
        assert (home / "dagster.yaml").read_text(encoding="utf-8") == INSTANCE_YAML.read_text(encoding="utf-8")
    edited = EARLIER_INSTANCE_YAMLS[-1].replace("max_concurrent_runs: 10", "max_concurrent_runs: 4")
    (home / "dagster.yaml").write_text(edited, encoding="utf-8")
    instance_for(settings)
    assert (home / "dagster.yaml").read_text(encoding="utf-8") == edited
