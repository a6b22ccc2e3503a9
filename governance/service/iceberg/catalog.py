"""The catalog's decisions, apart from HTTP: which tables a user sees, a table load decided and
recorded as a read, and the version an engine reports it scanned recorded once per load."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from governance.access.guard import authorize, record_all
from governance.access.policy import Decision, Policy, Verb
from governance.catalog.states import VersionStatus
from governance.errors import AccessDenied, InvalidInput, NoSuchNamespace, NotFound, shown
from governance.lake import CATALOG_NAME
from governance.lake.iceberg import IcebergTables
from governance.lake.objects import ATTEMPTS
from governance.lake.serving import ServedTable, served_table
from governance.lake.signing import Signer
from governance.lake.vending import Vended, Vendor
from governance.service.context import Service
from governance.service.iceberg.kept import Alike, Folders, Loads, Names
from governance.service.sessions import Principal
from governance.spec import Spec, SpecSet
from governance.zones import AssetKey

CHANNEL = "iceberg"
VENDED = "vended-credentials"
# The versions looked at for vended credentials, newest first: a session policy names about twenty.
VENDED_VERSIONS = 64


@dataclass(frozen=True)
class Asked:
    """A request of one principal through one engine, from one peer."""

    principal: Principal
    engine: str
    peer: str

    def details(self, table: str | None = None, **more: Any) -> dict[str, Any]:
        """What the ledger keeps of the request: how it reached us, the engine and the table it concerns."""
        return {**self.principal.recorded(), "engine": self.engine, **({"table": table} if table else {}), **more}


class RestCatalog:
    """What the catalog answers, for the service it is part of."""

    def __init__(self, service: Service):
        self.service = service
        self.loads = Loads()
        self.folders = Folders()
        self.names = Names()
        self._grouped: Alike | None = None

    @property
    def tables(self) -> IcebergTables:
        snapshots = self.service.custody.lake.tables
        if snapshots is None:
            raise InvalidInput("CUSTODY_TABLES=off: versions are not kept as table snapshots, and no engine reads them")
        return snapshots.tables

    def readable(self, principal: Principal, namespace: str | None = None) -> list[AssetKey]:
        """The tables the principal may load, in `namespace` if given: deciding each, recording none
        (a listing reads no row). A table made less than STATUS_SECONDS ago may be missing."""
        alike = self._alike(self.service.specs(recent=True), self.names.keys(self.tables))
        identity = principal.identity()

        def decide(policy: Policy, _: Mapping[str, str]) -> list[AssetKey]:
            allowed = [spec is not None and policy.decide(identity, Verb.READ, spec).allowed for spec in alike.specs]
            return [key for key, group in alike.keys if allowed[group] and namespace in (None, key.domain)]

        return self.service.custody.deciding(decide)

    def _alike(self, specs: SpecSet, names: list[AssetKey]) -> Alike:
        kept = self._grouped
        if kept is None or kept.of is not specs or kept.names is not names:
            kept = self._grouped = Alike.of_tables(specs, names)
        return kept

    def namespace(self, principal: Principal, namespace: str) -> list[AssetKey]:
        """The tables of `namespace` the principal may load; NoSuchNamespace if none."""
        readable = self.readable(principal, namespace)
        if not readable:
            raise NoSuchNamespace(f"no namespace {shown(namespace)} holds a table you may read")
        return readable

    def load(self, asked: Asked, key: AssetKey, *, vend: bool = False) -> tuple[ServedTable, Vended | None]:
        """The table, once the principal may read the asset: the decision is recorded with the engine,
        and with the load's id, which the versions it reads are recorded with. With `vend`, and a
        read role to vend, credentials to read the table's files come with it."""
        table = self.tables.table_name(key)
        spec = self._spec(asked, key, self.service.specs(recent=True))
        load = self.loads.new(asked.principal.session, key)
        served = self._served(key)
        vendor = self.vendor if vend else None
        details = asked.details(
            table, load=load, current=served.current if served else None, **({"access": VENDED} if vendor else {})
        )
        self._authorize(asked, spec, details)
        if served is None:
            raise NotFound(f"{table} has no committed version yet")
        return served, self._vended(vendor, asked, key) if vendor else None

    def vend(self, asked: Asked, key: AssetKey) -> Vended | None:
        """Fresh credentials to read the table's files, once the principal may read the asset (the
        decision recorded, allowed or not); None where the catalog vends none (engines sign)."""
        vendor = self.vendor
        if vendor is None:
            self.allowed(asked, key)
            return None
        spec = self._spec(asked, key, self.service.specs(recent=True))
        self._authorize(asked, spec, asked.details(self.tables.table_name(key), access=VENDED, via="credentials"))
        if self.tables.peek(key) is None:
            raise NotFound(f"{self.tables.table_name(key)} has no committed version yet")
        return self._vended(vendor, asked, key)

    def _authorize(self, asked: Asked, spec: Spec, details: Mapping[str, Any]) -> None:
        """A read of the asset decided for the principal and recorded with `details`; AccessDenied unless allowed."""
        store = self.service.custody.store
        self.service.custody.deciding(
            lambda policy, settings: authorize(
                store, policy, asked.principal.identity(), Verb.READ, spec, details=details, settings=settings
            )
        )

    def _vended(self, vendor: Vendor, asked: Asked, key: AssetKey) -> Vended:
        """Credentials for the table's metadata and its newest committed versions' files: only the
        newest VENDED_VERSIONS are read, more than a session policy holds."""
        lake = self.service.custody.lake
        newest = reversed(self.service.custody.store.versions_page(key, VENDED_VERSIONS))
        versions = [f"{lake.at(row.path)}/" for row in newest if row.status == VersionStatus.COMMITTED]
        metadata = self.tables.location(key).removeprefix("s3://") + "/"
        return vendor.vend(key, [metadata, *versions], asked.principal.identity().user)

    def allowed(self, asked: Asked, key: AssetKey) -> None:
        """Nothing if the principal may read the asset (an existence check, vended credentials):
        a refusal is recorded as refusals are, an allowance not at all (the load was)."""
        spec = self._spec(asked, key, self.service.specs(recent=True))
        decision = self.service.custody.deciding(
            lambda policy, _: policy.decide(asked.principal.identity(), Verb.READ, spec)
        )
        self._refuse_unless(decision, asked, key)
        if self.tables.peek(key) is None:
            raise NotFound(f"{self.tables.table_name(key)} has no committed version yet")

    def scanned(self, asked: Asked, key: AssetKey, snapshot_id: int) -> int:
        """The version an engine reports it scanned by its snapshot, recorded as read once per load."""
        table = self.tables.table_name(key)
        spec = self._spec(asked, key, self.service.specs(recent=True))
        served = self._served(key)
        version = served.version_of(snapshot_id) if served else None
        if version is None:
            err = InvalidInput(f"snapshot {snapshot_id} is no version of {table} you may read")
            self._refused(asked, key, str(err), snapshot=snapshot_id)
            raise err
        self.read(asked, key, spec, version, via="metrics")
        return version

    def read(self, asked: Asked, key: AssetKey, spec: Spec, version: int, *, via: str) -> None:
        """Decide a read of a version the engine fetches; record it once per load, a refusal always."""
        store = self.service.custody.store

        def decide(policy, settings: Mapping[str, str]) -> Decision:
            decision = policy.decide(asked.principal.identity(), Verb.READ, spec, version)
            if not decision.allowed:
                return decision
            load = self.loads.first_read(asked.principal.session, key, version)
            if load is not None:
                details = asked.details(self.tables.table_name(key), load=load, via=via)
                record_all(store, [(decision, details)], settings=settings)
            return decision

        self._refuse_unless(self.service.custody.deciding(decide), asked, key, version=version)

    @cached_property
    def vendor(self) -> Vendor | None:
        """What vends credentials to engines that do not sign; None unless a read role is set."""
        settings = self.service.custody.settings
        return Vendor(settings) if settings.lake_url and settings.s3_read_role else None

    @cached_property
    def signer(self) -> Signer | None:
        """What signs engines' reads of the lake's store; None for a folder lake."""
        settings = self.service.custody.settings
        return Signer(settings) if settings.lake_url else None

    def table_config(self, key: AssetKey, vended: Vended | None = None) -> dict[str, str]:
        """What an engine needs to read the table's files: on an object store, its address and
        either the credentials vended to it, renewed at this table's credentials endpoint, or
        remote signing at this table's signing endpoint, and no key of the service's."""
        if self.signer is None:
            return {}
        settings = self.service.custody.settings
        table = f"v1/{CATALOG_NAME}/namespaces/{key.domain}/tables/{key.name}"
        config = {"client.region": self.signer.region, "s3.region": self.signer.region}
        if settings.s3_endpoint:
            config |= {"s3.endpoint": settings.s3_endpoint, "s3.path-style-access": "true"}
        if vended is not None:
            return (
                config
                | vended.config()
                | {
                    "client.refresh-credentials-endpoint": f"{table}/credentials",
                    "client.refresh-credentials-enabled": "true",
                }
            )
        return config | {
            "s3.remote-signing-enabled": "true",
            # PyIceberg signs through fsspec's S3 file system only, with its signer named.
            "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
            "s3.signer": "S3V4RestSigner",
            "s3.signer.endpoint": f"{table}/sign",
        }

    def storage_credentials(self, key: AssetKey, vended: Vended | None) -> list[dict[str, Any]]:
        """The spec's storage credentials: the vended ones, for the table's metadata and for the
        lake's versions (one storage prefix each, as the clients match them to files)."""
        if vended is None or self.signer is None:
            return []
        lake = self.service.custody.lake
        attempts = f"s3://{lake.at(ATTEMPTS)}/"
        return [{"prefix": prefix, "config": vended.config()} for prefix in (self.tables.location(key) + "/", attempts)]

    def sign(
        self, asked: Asked, key: AssetKey, method: str, uri: str, headers: Mapping[str, Sequence[str]]
    ) -> dict[str, list[str]]:
        """The headers to make a request with that the principal may make: a read of the table's
        metadata, or of the files of one of its committed versions, which is recorded once per
        load. Anything else is refused (AccessDenied), and the refusal recorded."""
        if self.signer is None:
            raise InvalidInput("the lake is a folder: engines read its files themselves, and nothing is signed")
        self._may_read(asked, key, self.signer, method, uri)
        return self.signer.sign(method, uri, headers)

    def sign_at_once(
        self, asked: Asked, key: AssetKey, method: str, uri: str, headers: Mapping[str, Sequence[str]]
    ) -> dict[str, list[str]] | None:
        """The headers `sign` gives, when all its decision needs is in this process's memory and
        there is nothing to record: the table's metadata, or a further file of a version this load
        has read, found committed less than STATUS_SECONDS ago, for a user the directory answers
        for at once, who may read it. None otherwise, and `sign` decides on a thread: a request
        that would wait for the catalog or a server never holds up the others."""
        signer, specs, policy = self.signer, self.service.specs_at_once(), self.service.custody.policy_at_once()
        if signer is None or specs is None or policy is None or (spec := specs.get(key)) is None:
            return None
        identity = asked.principal.identity()
        try:
            read = signer.read_of(method, uri)
        except AccessDenied:
            return None  # refused, and recorded, on a thread
        version = None
        if not read.key.startswith(self._metadata_key(key)):
            held = self.folders.known(self.service.custody, f"s3://{signer.bucket}/{read.key}")
            if held is None or held.asset != str(key) or self.folders.committed_as_known(held) is not True:
                return None
            if not self.loads.read_already(asked.principal.session, key, held.number):
                return None
            version = held.number
        if not policy.directory.answers_at_once(identity.user):
            return None
        if not policy.decide(identity, Verb.READ, spec, version).allowed:
            return None
        return signer.sign_at_once(method, uri, headers)

    def _metadata_key(self, key: AssetKey) -> str:
        """Where the table's metadata is in the lake's bucket."""
        return self.tables.location(key).removeprefix("s3://").split("/", 1)[-1] + "/"

    def _may_read(self, asked: Asked, key: AssetKey, signer: Signer, method: str, uri: str) -> None:
        table = self.tables.table_name(key)
        spec = self._spec(asked, key, self.service.specs(recent=True))
        try:
            read = signer.read_of(method, uri)
        except AccessDenied as err:
            self._refused(asked, key, str(err).removeprefix("denied: "), request=f"{method} {shown(uri, 200)}")
            raise
        if read.key.startswith(self._metadata_key(key)):
            decision = self.service.custody.deciding(
                lambda policy, _: policy.decide(asked.principal.identity(), Verb.READ, spec)
            )
            self._refuse_unless(decision, asked, key)
            return
        found = self.folders.version(self.service.custody, f"s3://{signer.bucket}/{read.key}")
        if found is None or found.asset != str(key) or not self.folders.committed(self.service.custody, found):
            reason = f"{shown(read.key, 200)} is no file of a version of {table} you may read"
            self._refused(asked, key, reason, request=f"{method} {shown(uri, 200)}")
            raise AccessDenied(f"denied: {reason}")
        self.read(asked, key, spec, found.number, via="signing")

    def _served(self, key: AssetKey) -> ServedTable | None:
        return served_table(self.tables, key, self.service.custody.store.committed_numbers(key))

    def _spec(self, asked: Asked, key: AssetKey, specs: SpecSet) -> Spec:
        """The spec of the asset a table is of; NotFound, recorded, for a table no spec declares."""
        spec = specs.get(key)
        if spec is None:
            message = f"no table {self.tables.table_name(key)}: no spec declares {key}"
            self._refused(asked, key, message)
            raise NotFound(message)
        return spec

    def _refuse_unless(self, decision: Decision, asked: Asked, key: AssetKey, **more: Any) -> None:
        if not decision.allowed:
            self.service.refusals.refused(asked.peer, decision, asked.details(self.tables.table_name(key), **more))
            raise AccessDenied(f"denied: {decision.reason}")

    def _refused(self, asked: Asked, key: AssetKey | None, reason: str, **more: Any) -> None:
        """Record a refused request that concerns a table, as refusals are (a flood's repeats counted)."""
        decision = Decision(asked.principal.identity(), Verb.READ, str(key) if key else None, False, reason)
        table = self.tables.table_name(key) if key else None
        self.service.refusals.refused(asked.peer, decision, asked.details(table, **more))
