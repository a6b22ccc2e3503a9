"""What access answers are made of, as plain values: a grant's or revoke's change, and who holds
each role on an asset. A client of the service builds them from its JSON without loading the
directory, the policy or the catalog."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MembershipChange:
    """What a grant or revoke did: `changed` is False when the directory already said so."""

    verb: str
    role: str
    asset: str
    group: str
    user: str
    changed: bool
    shared_with: tuple[str, ...]
    still_member: bool

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MembershipChange:
        return cls(**{**data, "shared_with": tuple(data["shared_with"])})


@dataclass(frozen=True)
class RoleView:
    role: str
    group: str
    members: tuple[str, ...]
    may: tuple[str, ...]


@dataclass(frozen=True)
class AccessView:
    """Who holds each role on an asset, what each role may do, and the rules that apply."""

    asset: str
    classification: str
    pii: bool
    needs_verified: bool
    roles: tuple[RoleView, ...]
    admin_group: str
    admins: tuple[str, ...]
    auditor_group: str
    auditors: tuple[str, ...]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AccessView:
        """The view its JSON form (the API's, `custody access show --json`) describes."""
        lists = ("admins", "auditors")
        roles = tuple(RoleView(**{**r, "members": tuple(r["members"]), "may": tuple(r["may"])}) for r in data["roles"])
        return cls(**{**data, "roles": roles, **{name: tuple(data[name]) for name in lists}})
