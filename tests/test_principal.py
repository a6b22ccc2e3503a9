"""The principal a signed-in request carries to Dagster's webserver: trusted when this process signed
it, or when the service in front of a webserver served on its own signed it lately with the key
whose public half the webserver holds; nothing else stands for a user."""

from __future__ import annotations

import time

import pytest

from governance.errors import InvalidInput
from governance.service.principal import (
    HEADER_SECONDS,
    SIGNING_VARIABLE,
    VERIFY_VARIABLE,
    UiKeys,
    principal_from,
    signed_principal,
)
from governance.service.sessions import Principal

BOB = Principal("bob", "password", "session-id")


def webserver_of(keys: UiKeys) -> dict[str, str]:
    """The environment of a webserver behind the service holding `keys`: the public key alone."""
    return {VERIFY_VARIABLE: keys.environ()[VERIFY_VARIABLE]}


def test_a_principal_the_service_signed_is_trusted_by_the_webserver_holding_its_public_key():
    keys = UiKeys.new()
    assert principal_from(signed_principal(BOB, keys), webserver_of(keys)) == BOB


def test_a_principal_signed_with_another_key_pair_is_not_trusted():
    keys = UiKeys.new()
    assert principal_from(signed_principal(BOB, UiKeys.new()), webserver_of(keys)) is None
    assert principal_from(signed_principal(BOB, keys), {}) is None


def test_a_principal_signed_by_the_service_longer_ago_than_a_header_lives_is_not_trusted(monkeypatch):
    keys = UiKeys.new()
    signed_at = time.time()
    header = signed_principal(BOB, keys)
    monkeypatch.setattr(time, "time", lambda: signed_at + HEADER_SECONDS + 2)
    assert principal_from(header, webserver_of(keys)) is None


def test_a_principal_the_service_signed_for_later_than_now_is_not_trusted(monkeypatch):
    keys = UiKeys.new()
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now + 60)
    ahead = signed_principal(BOB, keys)
    monkeypatch.setattr(time, "time", lambda: now)
    assert principal_from(ahead, webserver_of(keys)) is None


def test_a_principal_this_process_signed_is_trusted_however_old(monkeypatch):
    header = signed_principal(BOB)
    later = time.time() + 10 * HEADER_SECONDS
    monkeypatch.setattr(time, "time", lambda: later)
    assert principal_from(header, {}) == BOB


def test_a_signature_spelled_another_way_is_not_trusted():
    keys = UiKeys.new()
    payload, _, signature = signed_principal(BOB, keys).partition(".")
    for spelled in (signature.rstrip("="), signature + "0", signature.replace("-", "+").replace("_", "/")):
        if spelled != signature:
            assert principal_from(f"{payload}.{spelled}", webserver_of(keys)) is None


def test_a_key_pair_round_trips_through_the_environment():
    keys = UiKeys.new()
    again = UiKeys.from_environ(keys.environ())
    assert principal_from(signed_principal(BOB, again), webserver_of(keys)) == BOB


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
        principal_from(signed_principal(BOB, UiKeys.new()), {VERIFY_VARIABLE: "c2hvcnQ"})
