"""Custody from Python: the catalog for auditors, and governed reads as the user running Python.

    custody = Custody.from_env()
    custody.catalog(search="revenue")                     # pandas DataFrame, one row per asset
    custody.provenance("sales/product_summary@2")         # a graph Jupyter draws; .to_frame()
    custody.ledger(action="read")                         # who read what, allowed or denied
    table = custody.read("sales/product_summary")         # pyarrow.Table
    frame = custody.read_spark(spark, "sales/clients@2")  # pyspark DataFrame
    custody.apply_specs(["sales/products"])               # an owner puts an edit in force

With CUSTODY_URL set, `Custody.from_env()` asks the Custody service instead, for the user of the
token `custody login` kept, and this process needs none of the catalog's, the lake's or the
directory's credentials.

Answers about the catalog are read, never recorded; reads of data and of the ledger are decided by
policy and recorded.
Requests are made as the OS user running the process, as the `os_users` setting maps it to the
directory; `as_user=` another user needs `password=` theirs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from governance.access.guard import authenticate, enforce
from governance.access.local import LocalUser, local_user, record_local, refuse_acting_as
from governance.access.passwords import delay_base
from governance.access.policy import Decision, Identity, Policy, Verb
from governance.access.reads import Target, open_version, read_table
from governance.access.settings import pinned_settings, policy_of
from governance.catalog import Catalog, closing_checkpoint
from governance.catalog.models import VersionRow
from governance.config import Settings
from governance.errors import NotFound, SettingsChanged, shown
from governance.lake import open_lake
from governance.spec import SpecSet, load_specs
from governance.zones import AssetKey, Lake, VersionRef

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from governance.approval import Applied, Edit, HistoryEntry
    from governance.catalog.ledgerfilter import LedgerFilter
    from governance.catalog.models import LedgerEntry
    from governance.frames import AssetCard, Frame
    from governance.lineage.pictures import LineageGraph
    from governance.lineage.readers import Reader
    from governance.render import LedgerReport
    from governance.service.remote import RemoteCustody

PASSWORD_VARIABLE = "CUSTODY_PASSWORD"
# How many times a decision is made again when an admin changes the settings it was made under
# before it is recorded: more than that many changes in a moment is a fight worth reporting.
DECIDING_ATTEMPTS = 3
T = TypeVar("T")


class Custody:
    """The catalog, the specs and the policy that settings describe."""

    def __init__(self, settings: Settings, environ: Mapping[str, str] | None = None, channel: str = "python"):
        self.settings = settings
        self.environ = os.environ if environ is None else environ
        # How requests reach this Custody, as the ledger records them: python, or cli for the commands.
        self.channel = channel
        self._policy: tuple[dict[str, str], Policy] | None = None

    @classmethod
    def from_env(cls) -> Custody | RemoteCustody:
        """Custody as the environment says: through the service CUSTODY_URL names, holding no
        credential (see governance.service.remote); without it, in process with the CUSTODY_* settings."""
        from governance.service.remote import RemoteCustody

        remote = RemoteCustody.from_environ(os.environ)
        return remote if remote is not None else cls(Settings.from_env())

    @cached_property
    def store(self) -> Catalog:
        """The catalog's database: versions, lineage, specs in force, the ledger."""
        return Catalog.from_settings(self.settings, self.environ)

    @cached_property
    def lake(self) -> Lake:
        return open_lake(self.settings)

    @cached_property
    def specs(self) -> SpecSet:
        settings = self.settings
        return load_specs(settings.specs, settings.cache_dir, transform_packages=settings.transform_packages)

    @property
    def policy(self) -> Policy:
        """Who may do what, as the settings pinned in the catalog say now: an admin's change counts
        from the next decision. The directory is kept while they stay the same."""
        return self._read_policy()[1]

    def _read_policy(self) -> tuple[dict[str, str], Policy]:
        values = pinned_settings(self.store, self.settings, self.environ).values()
        current = self._policy
        if current is None or current[0] != values:
            # Another thread may replace it meanwhile with what it read: this one decides under its own.
            current = self._policy = (values, policy_of(values, self.environ, self.settings.home))
        return current

    def policy_at_once(self) -> Policy | None:
        """The policy as last read, if it was: for a decision that must not wait to read it."""
        kept = self._policy
        return kept[1] if kept is not None else None

    def deciding(self, decide: Callable[[Policy, Mapping[str, str]], T]) -> T:
        """`decide(policy, settings)` under the policy as last read, without reading it again: what
        `decide` records under `settings` (see guard.record_all) counts only if an admin has not
        changed them since, checked where it commits; if they were, it is decided again under the
        new ones, up to DECIDING_ATTEMPTS times (then SettingsChanged). A long-lived caller (the
        service) so reads the settings once per change, not once per decision. `decide` must record
        its decisions at most once, as its last write: a refused try has recorded nothing."""
        values, policy = self._policy or self._read_policy()
        for _ in range(DECIDING_ATTEMPTS - 1):
            try:
                return decide(policy, values)
            except SettingsChanged:
                values, policy = self._read_policy()
        return decide(policy, values)

    def identity(self, user: str | None = None, password: str | None = None, run_id: str | None = None) -> Identity:
        """Who asks: with a password (given, or in CUSTODY_PASSWORD), `user` (default: the local
        user) as the directory verifies it; without one, the local user, the OS user running this
        process as the `os_users` setting maps it. Naming anyone else without their password is
        refused. With `run_id`, the identity is recorded for that run, which its steps then find."""
        return self._identity(self.policy, user, password, run_id)

    def _identity(self, policy: Policy, user: str | None, password: str | None, run_id: str | None) -> Identity:
        password = password if password is not None else self.environ.get(PASSWORD_VARIABLE)
        local = local_user(policy.os_users)
        if password is not None:
            details = {"channel": self.channel, "origin": local.origin}
            return self.authenticate(user or local.user, password, run_id, details)
        if user is not None and user != local.user:
            with closing_checkpoint():
                refuse_acting_as(self.store, policy, local, user, self.channel)
        identity = local.identity(self.channel)
        if run_id is not None:
            with closing_checkpoint():
                record_local(self.store, policy, local, self.channel, run_id)
        return identity

    @property
    def local(self) -> LocalUser:
        """The OS user running this process, as the pinned `os_users` setting maps it to the directory."""
        return local_user(self.policy.os_users)

    def authenticate(
        self,
        user: str,
        password: str,
        run_id: str | None = None,
        details: Mapping[str, Any] | None = None,
        *,
        device: str | None = None,
        refusals: Callable[[Decision, Mapping[str, Any]], None] | None = None,
    ) -> Identity:
        """`user` verified by the directory's check of `password`; the attempt is in the ledger, with
        `details`, either way (a refusal through `refusals` when given), and a wrong password raises
        AccessDenied. `device`: the id of the device token the client holds for `user`, whose failures
        are counted apart from other clients' (governance.access.throttle)."""
        with closing_checkpoint():
            return authenticate(
                self.store,
                self.policy,
                user,
                password,
                run_id,
                delay_base(self.environ),
                details,
                device=device,
                refusals=refusals,
            )

    def open(self, target: str, *, as_user: str | None = None, password: str | None = None) -> VersionRow:
        """The version `target` names (newest committed without `@N`), once `as_user` may read it.
        The decision is in the ledger, and checkpointed, when this returns or raises."""
        parsed = Target.parse(target)
        policy = self.policy
        identity = self._identity(policy, as_user, password, None)
        with closing_checkpoint():
            return open_version(self.store, policy, self.specs.get(parsed.key), identity, parsed)

    def read(
        self,
        target: str,
        *,
        as_user: str | None = None,
        password: str | None = None,
        limit: int | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """The version's rows as an Arrow table."""
        row = self.open(target, as_user=as_user, password=password)
        return read_table(self.lake, row, limit=limit, columns=columns)

    def read_spark(
        self, spark: SparkSession, target: str, *, as_user: str | None = None, password: str | None = None
    ) -> DataFrame:
        """The version as a Spark DataFrame."""
        from governance.versions import read_dataframe

        return read_dataframe(spark, self.lake, self.open(target, as_user=as_user, password=password))

    def spec_edits(self, assets: Sequence[str] = ()) -> list[Edit]:
        """What the spec files change against the definitions in force (of `assets`, else all)."""
        from governance.approval import edits

        return edits(self.store, self.specs, self.policy.directory, [AssetKey.parse(a) for a in assets])

    def apply_specs(
        self, assets: Sequence[str] = (), *, as_user: str | None = None, password: str | None = None
    ) -> list[Applied]:
        """Put the edited specs in force, all or none, as `as_user`: an owner of each. Recorded."""
        from governance.approval import apply

        identity = self.identity(as_user, password)
        with closing_checkpoint():
            return apply(self.store, self.policy, identity, self.specs, [AssetKey.parse(a) for a in assets])

    def spec_history(self, asset: str) -> list[HistoryEntry]:
        """Each spec of `asset` put in force, oldest first, with who applied it and what it changed."""
        from governance.approval import history

        return history(self.store, AssetKey.parse(asset))

    def spec(self, target: str) -> dict:
        """The spec body an asset had, by `ASSET@HASH` (at least 6 hex digits of the hash)."""
        from governance.approval import snapshot

        asset, _, prefix = target.partition("@")
        return snapshot(self.store, AssetKey.parse(asset), prefix)[1]

    def spec_diff(self, asset: str, old: str, new: str) -> list[str]:
        """The changes between two recorded specs of `asset`, by hash prefix, one line each."""
        from governance.approval import compare

        return [change.line() for change in compare(self.store, AssetKey.parse(asset), old, new)[2]]

    def catalog(
        self,
        search: str | None = None,
        *,
        domain: str | None = None,
        classification: str | None = None,
        owner: str | None = None,
    ) -> Frame:
        """Every asset with its roles, classification and newest version; narrowed as `custody catalog` narrows it."""
        from governance.catalog.entries import Filters
        from governance.catalog.listing import listing
        from governance.frames import catalog_frame

        return catalog_frame(listing(self.store, Filters(search, domain, classification, owner)))

    def asset(self, key: str) -> AssetCard:
        """One asset whole: its spec, columns, versions, inputs and dependents."""
        from governance.catalog.listing import detail
        from governance.frames import AssetCard

        return AssetCard(detail(self.store, AssetKey.parse(key)))

    def versions(self, key: str) -> Frame:
        """Every version of the asset, purged ones too, oldest first."""
        from governance.frames import versions_frame

        asset = AssetKey.parse(key)
        rows = self.store.versions(asset)
        if not rows and not self.store.has_asset(asset):
            raise NotFound(
                f"unknown asset {asset}: the catalog has no spec and no version of it (custody catalog lists them)"
            )
        return versions_frame(rows)

    def provenance(self, ref: str, depth: int | None = None) -> LineageGraph:
        """Everything `ref` (DOMAIN/NAME@N) was built from, down to its DropZone files, as a graph."""
        return self._graph(ref, depth=depth)

    def impact(self, ref: str, depth: int | None = None) -> LineageGraph:
        """Every version built from `ref`, transitively: what a bad input version touched."""
        return self._graph(ref, impact=True, depth=depth)

    def columns(self, ref: str, column: str) -> LineageGraph:
        """Where `column` of `ref` comes from, column by column, back to the DropZone fields."""
        return self._graph(ref, column=column)

    def _graph(self, ref: str, **how: Any) -> LineageGraph:
        from governance.lineage.pictures import lineage_graph

        return lineage_graph(self.store, VersionRef.parse(ref), **how)

    def ledger(
        self,
        *,
        asset: str | None = None,
        version: int | None = None,
        actor: str | None = None,
        action: str | None = None,
        run_id: str | None = None,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        limit: int | None = None,
        as_user: str | None = None,
        password: str | None = None,
    ) -> Frame:
        """Ledger entries, oldest first, that match every filter given: `since` and `until` are ISO
        dates or times (UTC unless they say otherwise) or datetimes; `limit` keeps the oldest. For
        the auditor and admin groups, as `open` decides who asks."""
        from governance.frames import ledger_frame
        from governance.ledger import LedgerFilter

        where = LedgerFilter.asked(
            asset=asset,
            version=version,
            actor=actor,
            action=action,
            run_id=run_id,
            since=since,
            until=until,
            limit=limit,
        )
        return ledger_frame(self.ledger_entries(where, as_user=as_user, password=password))

    def ledger_entries(
        self, where: LedgerFilter, *, as_user: str | None = None, password: str | None = None
    ) -> list[LedgerEntry]:
        """The entries `where` selects, once `as_user` may read the ledger (an auditor or an admin).
        The decision is in the ledger, and checkpointed, before anything is read."""
        from governance import ledger

        policy = self.policy
        identity = self._identity(policy, as_user, password, None)
        with closing_checkpoint():
            enforce(self.store, policy.decide(identity, Verb.LEDGER_READ, None))
        with self.store.reading() as session:
            return ledger.entries(session, where)

    def foreign_run(
        self, run_id: str, *, events: bool = False, as_user: str | None = None, password: str | None = None
    ) -> dict[str, Any]:
        """A run another tool reported, by its id or the beginning of it (see
        governance.foreign.history.run_detail). With `events`, its facets and events as received too,
        once `as_user` may read the ledger (an auditor or an admin): the decision is in the ledger first."""
        from governance.foreign.history import run_detail

        if events:
            policy = self.policy
            identity = self._identity(policy, as_user, password, None)
            with closing_checkpoint():
                details = {"run": shown(run_id, 80), "read": "foreign run events"}
                enforce(self.store, policy.decide(identity, Verb.LEDGER_READ, None), details=details)
        with self.store.reading() as session:
            return run_detail(session, run_id, events)

    def readers(
        self, ref: str, *, depth: int | None = None, as_user: str | None = None, password: str | None = None
    ) -> Frame:
        """Everyone who read the version, or a version built from it, through any channel (the CLI,
        the API, Python, an engine through the Iceberg catalog): who must be told when it turns out
        wrong. For the auditor and admin groups, as `ledger` decides who asks."""
        from governance.frames import readers_frame

        return readers_frame(reader.to_dict() for reader in self.reader_list(ref, depth, as_user, password))

    def reader_list(
        self, ref: str, depth: int | None = None, as_user: str | None = None, password: str | None = None
    ) -> list[Reader]:
        """`readers`, as the ledger's decision allows them: one `ledger.read` entry, allowed or denied."""
        from governance.lineage.readers import readers

        policy = self.policy
        identity = self._identity(policy, as_user, password, None)
        with closing_checkpoint():
            enforce(self.store, policy.decide(identity, Verb.LEDGER_READ, None), details={"readers": ref})
        return readers(self.store, VersionRef.parse(ref), depth)

    def access(self, key: str) -> Frame:
        """Each role on the asset, as its definition in force names them: its group, its members as the
        directory says now, and what it may do."""
        from governance.access.grants import show
        from governance.approval import in_force, spec_in_force
        from governance.frames import access_frame

        asset = AssetKey.parse(key)
        found = in_force(self.store, [asset]).get(asset)
        if found is None:
            raise NotFound(f"unknown asset {asset}: no definition of it is in force (custody catalog lists the assets)")
        return access_frame(show(self.policy, spec_in_force(found, Path(f"{asset}.yaml"))))

    def verify(self) -> LedgerReport:
        """Recompute the ledger's hash chain and hold it against its checkpoints; shown as
        `custody ledger verify` prints it: what held, what could not be verified and why."""
        from governance import ledger
        from governance.render import LedgerReport
        from governance.rollover import leftovers

        with self.store.reading() as session:
            result = ledger.verify(session, self.store.checkpoints)
        segments = self.settings.ledger_segments
        unfinished = tuple(path.name for path in leftovers(self.store, segments))
        checkpoints = self.store.checkpoints
        return LedgerReport(result, checkpoints.path if checkpoints else None, segments, unfinished)
