"""The principal a signed-in request carries to Dagster's webserver: trusted when this process signed
it, or when the service in front of a webserver served on its own signed it lately with the key
whose public half the webserver holds, and only for the request it was signed for; nothing else
stands for a user."""

from __future__ import annotations

import time

import pytest

from governance.errors import InvalidInput
from governance.service.principal import (
    HEADER_SECONDS,
    OWN_HEADER_SECONDS,
    SIGNING_VARIABLE,
    VERIFY_VARIABLE,
    UiKeys,
    signed_for,
    signed_principal,
)
from governance.service.sessions import Principal

BOB = Principal("bob", "password", "session-key")
LAUNCH = b'{"query": "mutation { launchRun }"}'


def signed(principal: Principal, keys: UiKeys | None = None) -> str:
    return signed_principal(principal, keys, method="POST", body=LAUNCH)


def principal_from(header: str | None, environ: dict[str, str], body: bytes = LAUNCH) -> Principal | None:
    found = signed_for(header, "POST", body, environ)
    return found.principal if found is not None else None


def webserver_of(keys: UiKeys) -> dict[str, str]:
    """The environment of a webserver behind the service holding `keys`: the public key alone."""
    return {VERIFY_VARIABLE: keys.environ()[VERIFY_VARIABLE]}


def test_a_principal_the_service_signed_is_trusted_by_the_webserver_holding_its_public_key():
    keys = UiKeys.new()
    assert principal_from(signed(BOB, keys), webserver_of(keys)) == BOB


def test_a_principal_signed_with_another_key_pair_is_not_trusted():
    keys = UiKeys.new()
    assert principal_from(signed(BOB, UiKeys.new()), webserver_of(keys)) is None
    assert principal_from(signed(BOB, keys), {}) is None


def test_a_principal_signed_by_the_service_longer_ago_than_a_header_lives_is_not_trusted(monkeypatch):
    keys = UiKeys.new()
    signed_at = time.time()
    header = signed(BOB, keys)
    monkeypatch.setattr(time, "time", lambda: signed_at + HEADER_SECONDS + 2)
    assert principal_from(header, webserver_of(keys)) is None


def test_a_principal_the_service_signed_for_later_than_now_is_not_trusted(monkeypatch):
    keys = UiKeys.new()
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now + 60)
    ahead = signed(BOB, keys)
    monkeypatch.setattr(time, "time", lambda: now)
    assert principal_from(ahead, webserver_of(keys)) is None


def test_a_principal_this_process_signed_is_trusted_for_longer_than_any_launch_takes(monkeypatch):
    header = signed(BOB)
    signed_at = time.time()
    monkeypatch.setattr(time, "time", lambda: signed_at + 10 * HEADER_SECONDS)
    assert principal_from(header, {}) == BOB
    monkeypatch.setattr(time, "time", lambda: signed_at + OWN_HEADER_SECONDS + 2)
    assert principal_from(header, {}) is None


def test_a_header_is_trusted_for_the_request_it_was_signed_for_alone():
    keys = UiKeys.new()
    header = signed(BOB, keys)
    assert principal_from(header, webserver_of(keys), LAUNCH + b" ") is None
    assert signed_for(header, "GET", LAUNCH, webserver_of(keys)) is None
    assert principal_from(header, webserver_of(keys), LAUNCH) == BOB


def test_each_header_carries_a_nonce_of_its_own():
    keys = UiKeys.new()
    first, second = (signed_for(signed(BOB, keys), "POST", LAUNCH, webserver_of(keys)) for _ in range(2))
    assert first is not None and second is not None and first.nonce != second.nonce


def test_a_signature_spelled_another_way_is_not_trusted():
    keys = UiKeys.new()
    payload, _, signature = signed(BOB, keys).partition(".")
    for spelled in (signature.rstrip("="), signature + "0", signature.replace("-", "+").replace("_", "/")):
        if spelled != signature:
            assert principal_from(f"{payload}.{spelled}", webserver_of(keys)) is None


def test_a_key_pair_round_trips_through_the_environment():
    keys = UiKeys.new()
    again = UiKeys.from_environ(keys.environ())
    assert principal_from(signed(BOB, again), webserver_of(keys)) == BOB


@pytest.mark.parametrize(
    ("environ", "said"),
    [
        ({}, f"--dagster-url needs {SIGNING_VARIABLE}"),
        ({SIGNING_VARIABLE: "c2hvcnQ"}, f"{SIGNING_VARIABLE} holds 5 bytes, not an Ed25519 key's 32"),
        ({SIGNING_VARIABLE: "@@@@"}, f"{SIGNING_VARIABLE} is not base64url"),
    ],
)
def test_a_missing_or_malformed_signing_key_is_refused_naming_the_variable(environ, said):
    with pytest.raises(InvalidInput, match=said):
        UiKeys.from_environ(environ)


def test_a_malformed_verify_key_is_refused_naming_the_variable():
    with pytest.raises(InvalidInput, match=f"{VERIFY_VARIABLE} holds"):
        principal_from(signed(BOB, UiKeys.new()), {VERIFY_VARIABLE: "c2hvcnQ"})
