"""Credentials vended to an engine that does not sign its requests (DuckDB reads with keys it is
given): the service assumes the lake's read role through STS, with a session policy that allows
reading only one table's metadata and its versions' files, for a few minutes. Which tables a user
may read is the catalog's decision (governance.service.iceberg); the store enforces the policy.

Stores whose STS does not evaluate session policies (moto's) need a role per asset instead:
CUSTODY_S3_READ_ROLE may name the asset with `{domain}` and `{name}`."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from governance.config import Settings
from governance.errors import EnvironmentProblem, shown
from governance.zones import AssetKey

# STS takes a session policy of at most 2,048 characters: past it, the oldest versions are left
# out, and an engine reads them through remote signing instead.
POLICY_CHARACTERS = 2_048
# What STS takes as a session's name, which the store's own logs show beside each request.
SESSION_NAME = re.compile(r"[^\w+=,.@-]")


@dataclass(frozen=True)
class Vended:
    """Credentials of the read role, for the prefixes named."""

    access_key_id: str
    secret_access_key: str
    session_token: str
    expires: datetime
    prefixes: tuple[str, ...]

    def config(self) -> dict[str, str]:
        """The credentials as Iceberg's clients take them in a table's configuration."""
        return {
            "s3.access-key-id": self.access_key_id,
            "s3.secret-access-key": self.secret_access_key,
            "s3.session-token": self.session_token,
            "s3.session-token-expires-at-ms": str(int(self.expires.timestamp() * 1000)),
        }


class Vendor:
    """Assumes the read role of the lake `settings` name, limited to the objects asked for."""

    def __init__(self, settings: Settings):
        if not (settings.lake_url and settings.s3_read_role):
            raise EnvironmentProblem(
                "credentials are vended only for a lake in an object store with CUSTODY_S3_READ_ROLE"
            )
        self.role = settings.s3_read_role
        self.seconds = settings.vended_seconds
        self.region = settings.s3_region or "us-east-1"
        self.endpoint = settings.sts_endpoint or None

    def role_of(self, key: AssetKey) -> str:
        return self.role.replace("{domain}", key.domain).replace("{name}", key.name)

    def vend(self, key: AssetKey, prefixes: Sequence[str], user: str) -> Vended:
        """Credentials to read the objects under `prefixes` (`bucket/path/`, most needed first) for
        `user`: as many prefixes as a session policy holds."""
        from botocore.exceptions import BotoCoreError, ClientError

        policy, kept = session_policy(prefixes)
        try:
            answer = self._sts.assume_role(
                RoleArn=self.role_of(key),
                RoleSessionName=session_name(user),
                Policy=policy,
                DurationSeconds=self.seconds,
            )
        except (BotoCoreError, ClientError) as err:
            raise EnvironmentProblem(
                f"STS did not give credentials of {shown(self.role_of(key), 200)} for {key}: {err}"
            ) from err
        given = answer["Credentials"]
        return Vended(given["AccessKeyId"], given["SecretAccessKey"], given["SessionToken"], given["Expiration"], kept)

    @cached_property
    def _sts(self) -> Any:
        import botocore.session

        return botocore.session.get_session().create_client("sts", region_name=self.region, endpoint_url=self.endpoint)


def session_policy(prefixes: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """A policy allowing reads of the objects under the first of `prefixes` that fit, and those prefixes."""
    kept: list[str] = []
    policy = _policy(kept)
    for prefix in prefixes:
        longer = _policy([*kept, prefix])
        if len(longer) > POLICY_CHARACTERS:
            break
        kept.append(prefix)
        policy = longer
    return policy, tuple(kept)


def _policy(prefixes: Sequence[str]) -> str:
    resources = [f"arn:aws:s3:::{prefix}*" for prefix in prefixes]
    statement = {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": resources}
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]}, separators=(",", ":"))


def session_name(user: str) -> str:
    return SESSION_NAME.sub("-", f"custody-{user}")[:64]
