"""What a guesser and a flood can do to the service's sign-ins, on the file directory and on LDAP: a
guesser who never stops keeps no user out of a client they signed in from before, a user the
directory does not know costs a check as long as one it knows, and a flood of refusals is recorded
kind by kind, its repeats counted, in a bounded number of entries.

Each directory has one `custody serve` (the API and the login, without the UI) that its tests share;
each test reads only the ledger entries of the users and peers it used."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
import yaml
from argon2 import extract_parameters
from sqlmodel import col, select

from governance.access import passwords
from governance.access.guard import ANONYMOUS
from governance.access.policy import Decision, Identity, Verb
from governance.catalog import Catalog
from governance.catalog.engine import make_engine
from governance.catalog.models import LedgerEntry
from governance.config import Settings
from governance.demo import demo_password
from governance.runs import Assurance
from governance.service.refusals import Refusals
from tests.conftest import plain_environ
from tests.dagster_servers import Guesser, Served, SignedIn, client, start_service, stop
from tests.ldap_server import environment, password_of, populated_slapd

DELAY_SECONDS = 0.05  # the first wait after failed sign-ins: at most 3.2 s
WINDOW_SECONDS = 1.0
# How soon the user gets in while a guesser keeps guessing: at their first try, so a check's time.
GETS_IN_WITHIN_SECONDS = 5.0
# Checked guesses after which each wait lasts 1.6 s or more (3 free, then DELAY_SECONDS doubled): a
# sign-in sent then comes while a wait runs, not in the moment between one and the guesser's next guess.
LONG_WAITS_AFTER = 8


@dataclass(frozen=True)
class Service:
    served: Served
    catalog: Catalog
    password: dict[str, str]

    def password_of(self, user: str) -> str:
        return self.password[user]


def serve(home: Path, env: dict[str, str], password: dict[str, str]) -> Iterator[Service]:
    env = {
        **plain_environ(home),
        **env,
        "CUSTODY_LOGIN_DELAY_SECONDS": str(DELAY_SECONDS),
        "CUSTODY_REFUSALS_WINDOW_SECONDS": str(WINDOW_SECONDS),
    }
    settings = Settings.under(home)
    server, port = start_service(settings, env, ui=False)
    try:
        yield Service(Served(port), Catalog(make_engine(settings.catalog_url)), password)
    finally:
        stop(server)


USERS = ("alice", "bob", "carol", "dave", "eve")


@pytest.fixture(scope="module", params=["file", "ldap"])
def service(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    home = tmp_path_factory.mktemp(f"signin-{request.param}") / "home"
    if request.param == "file":
        yield from serve(home, {}, {user: demo_password(user) for user in USERS})
        return
    with populated_slapd(tmp_path_factory.mktemp("slapd"), "Bind-5ecret") as ldap:
        yield from serve(home, environment(ldap), {user: password_of(user) for user in USERS})


def checked(guesser: Guesser) -> int:
    """How many of the guesser's guesses were checked, not refused unchecked for coming too soon."""
    return sum("unknown user or wrong password" in answer.text for answer in list(guesser.answers))


def entries(catalog: Catalog, *actions: str, actor: str | None = None) -> list[dict]:
    with catalog.reading() as session:
        query = select(LedgerEntry).where(col(LedgerEntry.action).in_(actions)).order_by(col(LedgerEntry.seq))
        found = session.exec(query if actor is None else query.where(LedgerEntry.actor == actor)).all()
    return [{"actor": e.actor, "action": e.action, **json.loads(e.details)} for e in found]


def test_a_guesser_who_never_stops_keeps_no_user_out_of_a_browser_they_signed_in_from(service):
    base, user = service.served, "bob"
    browser = SignedIn(base.port, user, service.password_of(user))  # an earlier sign-in: the browser is known
    assert browser.http.cookies.get("custody_device")

    def guess(n: int) -> requests.Response:
        return SignedIn(base.port).sign_in(user, f"guess-{n}")

    with Guesser(guess) as guesser:
        started = time.monotonic()
        answer = browser.sign_in(user, service.password_of(user))
        took = time.monotonic() - started
        while checked(guesser) < LONG_WAITS_AFTER:
            assert time.monotonic() - started < 60, f"{checked(guesser)} guesses checked in 60 s"
            time.sleep(0.05)
        stranger = SignedIn(base.port).sign_in(user, service.password_of(user))
    assert answer.status_code == 303 and took < GETS_IN_WITHIN_SECONDS  # at its first try
    assert stranger.status_code == 401 and "too many failed logins in a row" in stranger.text
    assert guesser.tries > 3
    [signed_in] = [e for e in entries(service.catalog, "authenticate", actor=user) if e["result"] == "allowed"][-1:]
    assert signed_in["device"] and signed_in["channel"] == "ui"


def test_a_guesser_who_never_stops_keeps_no_user_out_of_the_cli_they_logged_in_with(service, tmp_path):
    api, user = service.served.api, "carol"
    login = ("login", user, "--password-stdin")
    assert client(api, tmp_path, *login, stdin=service.password_of(user) + "\n").returncode == 0

    def guess(n: int) -> requests.Response:
        return requests.post(f"{api}/tokens", json={"user": user, "password": f"guess-{n}"}, timeout=60)

    with Guesser(guess):
        started = time.monotonic()
        again = client(api, tmp_path, *login, stdin=service.password_of(user) + "\n")
        took = time.monotonic() - started
    assert again.returncode == 0, again.stderr
    assert took < GETS_IN_WITHIN_SECONDS + 3  # the command's own start included


def test_a_user_s_own_sign_ins_however_many_never_queue_before_another_user_s_known_client(service):
    api = service.served.api
    known = {user: sign_in_token(api, user, service.password_of(user))["device"] for user in ("alice", "dave")}

    def alices(_: int) -> requests.Response:
        return requests.post(
            f"{api}/tokens",
            json={"user": "alice", "password": service.password_of("alice"), "device": known["alice"]},
            timeout=60,
        )

    answers = []
    with ThreadPoolExecutor(16) as pool:
        flood = [pool.submit(alices, n) for n in range(64)]
        for _ in range(5):
            answers.append(sign_in_token(api, "dave", service.password_of("dave"), known["dave"], raw=True))
        statuses = {future.result().status_code for future in flood}
    assert {answer.status_code for answer in answers} == {201}  # dave's known client: never turned away
    assert statuses <= {201, 503} and 503 in statuses  # alice's own, one at a time


def sign_in_token(api: str, user: str, password: str, device: str | None = None, *, raw: bool = False):
    answer = requests.post(f"{api}/tokens", json={"user": user, "password": password, "device": device}, timeout=60)
    if raw:
        return answer
    assert answer.status_code == 201, answer.text
    return answer.json()


def test_a_user_the_directory_does_not_know_is_checked_against_a_decoy_made_as_its_own_hashes_are(tmp_path):
    """Timing is a benchmark's (benchmarks/signin_flood.py); here, what makes it alike: the decoy's
    parameters are those most of the directory's hashes have, whatever new hashes would get."""
    seed = yaml.safe_load(Path("assets/directory.yaml").read_text())
    stored = [user["password"] for user in seed["users"].values() if user and "password" in user]
    usual = passwords.usual_parameters(stored)
    assert usual is not None and usual == extract_parameters(stored[0])
    assert extract_parameters(passwords._decoy(usual)) == usual
    assert extract_parameters(passwords.hashed("a-new-one", "x")) != usual  # what new hashes get


def test_a_flood_of_refusals_is_recorded_kind_by_kind_its_repeats_counted_in_a_bounded_number_of_entries(service):
    base, catalog = service.served, service.catalog
    time.sleep(WINDOW_SECONDS + 2)  # the other tests' repeats are recorded before this one starts
    before = {e["seq"] for e in seqs(catalog)}
    sent, started = 0, time.monotonic()
    for n in range(40):  # a forged token, again and again
        forged = {"Authorization": f"Bearer forged.token.{n % 2}"}
        assert requests.get(f"{base.api}/whoami", headers=forged, timeout=30).status_code == 401
        sent += 1
    for n in range(60):  # wrong passwords for as many names, some of nobody's
        assert SignedIn(base.port).sign_in(f"nobody{n}" if n % 2 else "dave", f"guess-{n}").status_code == 401
        sent += 1
    for name in ("*)(uid=*", "dave)(|(uid=*"):  # names that are no user's
        assert SignedIn(base.port).sign_in(name, "x").status_code == 401
        sent += 1
    windows = math.ceil((time.monotonic() - started) / WINDOW_SECONDS) + 1  # that the flood spanned, at most
    time.sleep(WINDOW_SECONDS + 2)  # every window has ended: the repeats are recorded
    added = [e for e in seqs(catalog) if e["seq"] not in before and e.get("peer") == "127.0.0.1"]
    refused = [e for e in added if e["details"].get("result") == "denied"]
    assert sum(e["details"].get("repeats", 1) for e in refused) == sent  # the counts add up
    kinds = {
        "this token is expired or was not made by this service",
        "unknown user or wrong password",
        "too many failed logins in a row",
        "invalid user name",
    }
    firsts = [e for e in refused if "repeats" not in e["details"]]
    assert len(refused) <= 2 * len(kinds) * windows  # a kind, a window: its first and its repeats
    for said in kinds:
        assert any(said in e["details"]["reason"] for e in firsts), said
    guesses = [e for e in refused if "wrong password" in e["details"]["reason"] and "repeats" in e["details"]]
    named = {name for e in guesses for name in e["details"]["names"]}
    assert {"dave", "nobody59"} & named and all(e["details"]["distinct_names"] >= 1 for e in guesses)


def test_a_client_that_varies_what_it_sends_past_every_reason_adds_one_kind_for_the_rest():
    written: list = []
    refusals = Refusals(written.extend, window=60, per_peer=3)
    anonymous = Identity(ANONYMOUS, Assurance.NONE)
    for n in range(10):
        refusals.refused("10.0.0.9", Decision(anonymous, Verb.SESSION, None, False, f"reason {chr(97 + n)}"), {})
    refusals.flush(everything=True)
    reasons = [decision.reason for decision, _ in written]
    assert reasons[:3] == ["reason a", "reason b", "reason c"]
    assert reasons[3].startswith("10.0.0.9 sent more kinds of refused requests than are recorded one by one")
    assert written[4][1]["repeats"] == 6 and len(written) == 5


def seqs(catalog: Catalog) -> list[dict]:
    with catalog.reading() as session:
        found = session.exec(select(LedgerEntry).order_by(col(LedgerEntry.seq))).all()
    return [{"seq": e.seq, "peer": json.loads(e.details).get("peer"), "details": json.loads(e.details)} for e in found]
