"""Custody from Python: governed reads as a named user, each one decided by policy and recorded.

    custody = Custody.from_env()
    table = custody.read("sales/product_summary", as_user="carol")          # pyarrow.Table
    frame = custody.read_spark(spark, "sales/clients@2", as_user="carol")   # pyspark DataFrame
    custody.apply_specs(["sales/products"], as_user="alice")                 # an owner puts an edit in force
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING

from governance.access.guard import authenticate
from governance.access.policy import Identity, Policy
from governance.access.reads import Target, open_version, read_dataframe, read_table
from governance.access.settings import pinned_settings, policy_of
from governance.catalog import Catalog, closing_checkpoint
from governance.catalog.models import VersionRow
from governance.config import Settings
from governance.spec import SpecSet, load_specs
from governance.zones import AssetKey

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from governance.approval import Applied, Edit, HistoryEntry

PASSWORD_VARIABLE = "CUSTODY_PASSWORD"


class Custody:
    """The catalog, the specs and the policy that settings describe."""

    def __init__(self, settings: Settings, environ: Mapping[str, str] | None = None):
        self.settings = settings
        self.environ = os.environ if environ is None else environ
        self._policy: tuple[dict[str, str], Policy] | None = None

    @classmethod
    def from_env(cls) -> Custody:
        return cls(Settings.from_env())

    @cached_property
    def catalog(self) -> Catalog:
        return Catalog.from_settings(self.settings, self.environ)

    @cached_property
    def specs(self) -> SpecSet:
        settings = self.settings
        return load_specs(settings.specs, settings.cache_dir, transform_packages=settings.transform_packages)

    @property
    def policy(self) -> Policy:
        """Who may do what, as the settings pinned in the catalog say now: an admin's change counts
        from the next decision. The directory is kept while they stay the same."""
        values = pinned_settings(self.catalog, self.settings, self.environ).values()
        if self._policy is None or self._policy[0] != values:
            self._policy = (values, policy_of(values, self.environ))
        return self._policy[1]

    def identity(self, user: str, password: str | None = None, run_id: str | None = None) -> Identity:
        """`user`, verified by the directory when a password is given (or set in CUSTODY_PASSWORD),
        else asserted. A wrong password is denied and recorded."""
        password = password if password is not None else self.environ.get(PASSWORD_VARIABLE)
        if password is None:
            return Identity.asserted(user)
        with closing_checkpoint():
            return authenticate(self.catalog, self.policy, user, password, run_id)

    def open(self, target: str, *, as_user: str, password: str | None = None) -> VersionRow:
        """The version `target` names (newest committed without `@N`), once `as_user` may read it.
        The decision is in the ledger, and checkpointed, when this returns or raises."""
        parsed = Target.parse(target)
        identity = self.identity(as_user, password)
        with closing_checkpoint():
            return open_version(self.catalog, self.policy, self.specs.get(parsed.key), identity, parsed)

    def read(self, target: str, *, as_user: str, password: str | None = None, limit: int | None = None,
             columns: Sequence[str] | None = None) -> pa.Table:
        """The version's rows as an Arrow table."""
        return read_table(self.open(target, as_user=as_user, password=password), limit=limit, columns=columns)

    def read_spark(self, spark: SparkSession, target: str, *, as_user: str, password: str | None = None) -> DataFrame:
        """The version as a Spark DataFrame."""
        return read_dataframe(spark, self.open(target, as_user=as_user, password=password))

    def spec_edits(self, assets: Sequence[str] = ()) -> list[Edit]:
        """What the spec files change against the definitions in force (of `assets`, else all)."""
        from governance.approval import edits

        return edits(self.catalog, self.specs, self.policy.directory, [AssetKey.parse(a) for a in assets])

    def apply_specs(self, assets: Sequence[str] = (), *, as_user: str, password: str | None = None) -> list[Applied]:
        """Put the edited specs in force, all or none, as `as_user`: an owner of each. Recorded."""
        from governance.approval import apply

        identity = self.identity(as_user, password)
        with closing_checkpoint():
            return apply(self.catalog, self.policy, identity, self.specs, [AssetKey.parse(a) for a in assets])

    def spec_history(self, asset: str) -> list[HistoryEntry]:
        """Each spec of `asset` put in force, oldest first, with who applied it and what it changed."""
        from governance.approval import history

        return history(self.catalog, AssetKey.parse(asset))

    def spec(self, target: str) -> dict:
        """The spec body an asset had, by `ASSET@HASH` (at least 6 hex digits of the hash)."""
        from governance.approval import snapshot

        asset, _, prefix = target.partition("@")
        return snapshot(self.catalog, AssetKey.parse(asset), prefix)[1]

    def spec_diff(self, asset: str, old: str, new: str) -> list[str]:
        """The changes between two recorded specs of `asset`, by hash prefix, one line each."""
        from governance.approval import compare

        return [change.line() for change in compare(self.catalog, AssetKey.parse(asset), old, new)[2]]
