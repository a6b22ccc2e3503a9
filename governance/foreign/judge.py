"""Whether the user a foreign run reports may read an asset, as the readers' policy says."""

from __future__ import annotations

from collections.abc import Callable

from governance.access.policy import Identity, Policy, Verb
from governance.foreign.join import FOREIGN_CHANNEL, Judge
from governance.runs import Assurance
from governance.spec import SpecSet
from governance.zones import AssetKey


def reader_judge(policy: Policy, specs: Callable[[], SpecSet]) -> Judge:
    """Whether the user a foreign run reports may read an asset, by the roles they hold on it: a
    reported name proves nothing, but one that holds no role is a read to look into. The specs are
    read only once a version is read."""

    def judge(user: str | None, asset: str) -> str | None:
        if user is None:
            return "the run reported no user"
        identity = Identity(user, Assurance.ASSERTED, "reported", FOREIGN_CHANNEL)
        decision = policy.holds_role(identity, Verb.READ, specs().get(AssetKey.parse(asset)))
        return None if decision.allowed else decision.reason

    return judge
