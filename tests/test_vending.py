"""Credentials vended to engines that do not sign: what the session policy names, and how long they last."""

from __future__ import annotations

import json

import pytest

from governance.config import Settings
from governance.errors import InvalidInput
from governance.lake.vending import POLICY_CHARACTERS, session_name, session_policy


def test_a_session_policy_names_as_many_prefixes_as_sts_takes_the_first_given_first():
    prefixes = [f"lake/base/_attempts/{number:032x}/data/" for number in range(100)]
    policy, kept = session_policy(["lake/base/_tables/sales/clients/", *prefixes])
    assert len(policy) <= POLICY_CHARACTERS
    assert kept[0] == "lake/base/_tables/sales/clients/"
    assert kept[1:] == tuple(prefixes[: len(kept) - 1])
    assert 10 < len(kept) < 100
    (statement,) = json.loads(policy)["Statement"]
    assert statement["Action"] == ["s3:GetObject"]
    assert statement["Resource"] == [f"arn:aws:s3:::{prefix}*" for prefix in kept]


def test_a_session_is_named_for_the_user_in_the_characters_sts_takes():
    assert session_name("carol") == "custody-carol"
    assert session_name("o'brien smith") == "custody-o-brien-smith"
    assert len(session_name("x" * 100)) == 64


def test_credentials_last_fifteen_minutes_unless_told_otherwise():
    assert Settings.from_env({}).vended_seconds == 900
    assert Settings.from_env({"CUSTODY_VENDED_SECONDS": "3600"}).vended_seconds == 3600


@pytest.mark.parametrize("seconds", ["60", "86400"])
def test_a_lifetime_sts_does_not_give_is_refused_by_name(seconds):
    with pytest.raises(InvalidInput, match=f"CUSTODY_VENDED_SECONDS={seconds}: STS gives credentials for 900 to 43200"):
        Settings.from_env({"CUSTODY_VENDED_SECONDS": seconds})
