"""The resident lander lands a streamed asset in a Spark session started once, for a landing run's
step, on a real broker and Spark: only for a started run that selects the asset, once, and as the
person the run's launch established, never as a request or a run's tag says."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import dagster as dg
import pytest

from assets.factory import REQUESTED_BY_TAG
from assets.lander import Lander, resident_lander, wait_until_listening
from assets.launch import instance_for
from governance.access.guard import ANONYMOUS
from governance.access.local import local_user, record_local
from governance.access.policy import Verb
from governance.catalog import Catalog
from governance.config import Settings
from governance.errors import AccessDenied, EnvironmentProblem, RemoteFailure
from governance.runs import os_user
from governance.streams import lander as resident
from governance.streams.lander import Ask, ask_lander, reachable, serving, socket_path
from resources import CustodyResource, SparkResource
from tests.helpers import all_versions, cli, recorded
from tests.kafka_server import kafka_environment
from tests.test_streams_landing import send

ASSET = dg.AssetKey(["sales", "clicks"])
# A Spark of its own to start, on a machine busy with the tests.
LANDER_START_SECONDS = 180


@pytest.fixture
def lander_env(cli_env: Settings, kafka, monkeypatch, tmp_path: Path) -> Settings:
    """The test's home, with the specs the `stream` fixture writes and the broker's settings."""
    for name, value in kafka_environment(kafka).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CUSTODY_SPECS", str(tmp_path / "specs"))
    monkeypatch.setenv("CUSTODY_SPECS_APPROVAL", "off")
    return replace(cli_env, specs=tmp_path / "specs")


@pytest.fixture
def lander(lander_env: Settings, spark) -> Iterator[Path]:
    """A lander serving on a thread of the test's process (its Spark is the test session's); the
    socket it listens at."""
    settings = lander_env
    server_of = Lander(settings, instance_for(settings), SparkResource())
    with serving(socket_path(settings.home), server_of.land) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield socket_path(settings.home)
        server.shutdown()
        thread.join()


def started_run(settings: Settings, *, selects: bool = True, tagged: str = "bob", verified: bool = True) -> str:
    """A run the instance shows started, for `tagged`, established as the CLI establishes its user
    (`verified`), or only named by its tag."""
    instance = instance_for(settings)
    run = dg.DagsterRun(
        job_name="__ASSET_JOB",
        run_id=str(uuid.uuid4()),
        status=dg.DagsterRunStatus.STARTED,
        asset_selection=frozenset({ASSET}) if selects else frozenset({dg.AssetKey(["sales", "other"])}),
        tags={REQUESTED_BY_TAG: tagged},
    )
    instance.add_run(run)
    if verified:
        custody = CustodyResource()
        record_local(custody.catalog, custody.policy(), local_user({os_user(): tagged}), "cli", run.run_id)
    return run.run_id


def refusal(path: Path, ask: Ask) -> RemoteFailure:
    with pytest.raises(RemoteFailure) as refused:
        ask_lander(path, ask, lambda _: None)
    return refused.value


def streamed(catalog: Catalog) -> list:
    return [row for row in all_versions(catalog) if row.asset_key == "sales/clicks"]


def test_a_landing_run_s_step_lands_in_the_lander_for_the_user_its_launch_established(
    cli_env, lander, kafka, stream, capsys, monkeypatch
):
    _, topic = stream()
    send(kafka, topic, [{"n": n} for n in range(5)])
    monkeypatch.setenv("CUSTODY_OS_USERS", f"{os_user()}=bob")
    code, _, err = cli(capsys, "ingest", "sales/clicks")
    assert code == 0, err
    catalog = Catalog.from_url(cli_env.catalog_url)
    [version] = streamed(catalog)
    assert version.rows == 5
    # Decided as the run was submitted, then again by the lander as the step would have.
    submitted, decided = recorded(catalog, action=Verb.INGEST.value, run_id=version.run_id)
    assert submitted["details"]["at"] == "submission" and "lander" not in submitted["details"]
    assert (decided["actor"], decided["assurance"], decided["details"]["result"]) == ("bob", "verified", "allowed")
    assert decided["details"]["lander"].startswith("pid ")


def test_a_request_for_a_run_that_is_not_running_is_refused_and_lands_nothing(cli_env, lander, kafka, stream):
    _, topic = stream()
    send(kafka, topic, [{"n": 1}])
    run_id = str(uuid.uuid4())
    refused = refusal(lander, Ask(run_id, "sales/clicks"))
    assert refused.kind == "AccessDenied" and "lands only for a started run" in str(refused)
    catalog = Catalog.from_url(cli_env.catalog_url)
    [denied] = recorded(catalog, action=Verb.INGEST.value, run_id=run_id)
    assert (denied["actor"], denied["details"]["result"]) == (ANONYMOUS, "denied")
    assert denied["details"]["peer"] == f"uid {os.getuid()} pid {os.getpid()}"
    assert streamed(catalog) == []


def test_a_request_for_an_asset_its_run_does_not_select_is_refused(cli_env, lander, kafka, stream):
    _, topic = stream()
    send(kafka, topic, [{"n": 1}])
    refused = refusal(lander, Ask(started_run(cli_env, selects=False), "sales/clicks"))
    assert "does not select sales/clicks" in str(refused)
    assert streamed(Catalog.from_url(cli_env.catalog_url)) == []


def test_a_run_whose_tag_names_a_producer_without_proof_is_denied_as_the_tag_asserts(cli_env, lander, kafka, stream):
    _, topic = stream()
    send(kafka, topic, [{"n": 1}])
    run_id = started_run(cli_env, verified=False)
    refused = refusal(lander, Ask(run_id, "sales/clicks"))
    assert refused.kind == "AccessDenied" and refused.exit_code == 3
    catalog = Catalog.from_url(cli_env.catalog_url)
    [denied] = recorded(catalog, action=Verb.INGEST.value, run_id=run_id)
    assert (denied["actor"], denied["assurance"], denied["details"]["result"]) == ("bob", "asserted", "denied")
    assert streamed(catalog) == []


def test_a_request_replayed_after_its_landing_committed_is_refused(cli_env, lander, kafka, stream):
    _, topic = stream()
    send(kafka, topic, [{"n": 1}])
    ask = Ask(started_run(cli_env), "sales/clicks")
    progress: list[str] = []
    landed = ask_lander(lander, ask, progress.append)
    assert any("landing in the resident lander" in line for line in progress)
    send(kafka, topic, [{"n": 2}])
    refused = refusal(lander, ask)
    assert "landed, for run" in str(refused)
    assert [row.id for row in streamed(Catalog.from_url(cli_env.catalog_url))] == [landed]


def test_a_request_that_is_not_one_is_refused_and_the_lander_answers_the_next(cli_env, lander, kafka, stream):
    _, topic = stream()
    send(kafka, topic, [{"n": 1}])
    for garbage in (b"x" * (resident.REQUEST_LIMIT + 10) + b"\n", b"{}\n", b"not json\n"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(str(lander))
            connection.sendall(garbage)
            answer = connection.makefile("rb").readline()
        assert b"a request to the lander is one line" in answer
    assert ask_lander(lander, Ask(started_run(cli_env), "sales/clicks"), lambda _: None) is not None


def test_a_flood_of_connections_leaves_steps_to_their_own_spark_until_it_ends(cli_env, lander, kafka, stream):
    _, topic = stream()
    send(kafka, topic, [{"n": 1}])
    ask = Ask(started_run(cli_env), "sales/clicks")
    waiting = []
    try:
        for _ in range(resident.MAX_CONNECTIONS):
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.connect(str(lander))
            waiting.append(connection)
        # Each idle connection takes a slot once its thread runs; until then, a request for no run
        # is answered (refused). Once they all have, a step is told none takes it: no answer at all.
        probe, deadline = Ask(str(uuid.uuid4()), "sales/clicks"), time.monotonic() + resident.REQUEST_SECONDS
        while True:
            with contextlib.suppress(RemoteFailure):
                if ask_lander(lander, probe, lambda _: None) is None:
                    break
            assert time.monotonic() < deadline, "the flood never filled the lander's slots"
    finally:
        for connection in waiting:
            connection.close()
    assert ask_lander(lander, ask, lambda _: None) is not None


def test_a_request_sent_too_slowly_is_dropped(lander, monkeypatch):
    monkeypatch.setattr(resident, "REQUEST_SECONDS", 1.0)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(str(lander))
        # Dropped part way, the rest of the trickle meets a closed connection.
        with contextlib.suppress(BrokenPipeError):
            for byte in b'{"run_id": ':
                connection.sendall(bytes([byte]))
                time.sleep(0.2)
        answer = connection.makefile("rb").readline()
    assert b"no whole request came within 1 s" in answer


def test_two_requests_for_one_run_land_it_once(cli_env, lander, kafka, stream):
    _, topic = stream()
    send(kafka, topic, [{"n": 1}])
    ask = Ask(started_run(cli_env), "sales/clicks")
    outcomes: list[object] = []

    def asked() -> None:
        try:
            outcomes.append(ask_lander(lander, ask, lambda _: None))
        except RemoteFailure as err:
            outcomes.append(err)

    both = [threading.Thread(target=asked) for _ in range(2)]
    for thread in both:
        thread.start()
    for thread in both:
        thread.join()
    landed = [outcome for outcome in outcomes if isinstance(outcome, int)]
    [refused] = [outcome for outcome in outcomes if isinstance(outcome, RemoteFailure)]
    assert len(landed) == 1 and "is landing, or landed, for run" in str(refused)
    assert len(streamed(Catalog.from_url(cli_env.catalog_url))) == 1


def test_a_request_from_another_os_user_s_process_is_refused_and_recorded(lander_env, kafka, spark, stream):
    stream()
    lander = Lander(lander_env, instance_for(lander_env), SparkResource())
    run_id = started_run(lander_env)
    with pytest.raises(AccessDenied, match="not uid"):
        lander.land(Ask(run_id, "sales/clicks", peer_uid=os.getuid() + 1, peer_pid=1), lambda _: None)
    [denied] = recorded(Catalog.from_url(lander_env.catalog_url), action=Verb.INGEST.value, run_id=run_id)
    assert denied["details"]["result"] == "denied" and denied["details"]["peer"] == f"uid {os.getuid() + 1} pid 1"


def test_a_second_lander_on_the_same_home_is_refused(lander, lander_env):
    with (
        pytest.raises(EnvironmentProblem, match="a lander already serves"),
        serving(socket_path(lander_env.home), lambda ask, progress: 0),
    ):
        pass
    assert reachable(lander)


def test_a_step_that_finds_no_lander_is_told_none_listens(tmp_path):
    assert ask_lander(socket_path(tmp_path), Ask("run", "sales/clicks"), lambda _: None) is None
    # A socket left by a lander that died: nobody answers it.
    path = socket_path(tmp_path)
    path.parent.mkdir()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(path))
    assert ask_lander(path, Ask("run", "sales/clicks"), lambda _: None) is None


def test_the_lander_process_serves_until_stopped_and_leaves_no_socket(lander_env, kafka, stream):
    _, topic = stream()
    send(kafka, topic, [{"n": 1}, {"n": 2}])
    path = socket_path(lander_env.home)
    with resident_lander(lander_env) as process:
        wait_until_listening(lander_env, process, LANDER_START_SECONDS)
        landed = ask_lander(path, Ask(started_run(lander_env), "sales/clicks"), lambda _: None)
    [version] = streamed(Catalog.from_url(lander_env.catalog_url))
    assert (version.id, version.rows) == (landed, 2)
    assert process.returncode == 0 and not path.exists()
