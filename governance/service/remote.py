"""Custody from Python through its service, for whoever holds none of the catalog's, the lake's or
the directory's credentials: `Custody.from_env()` gives one when CUSTODY_URL is set. It answers as
the in-process Custody does (the same frames, graphs and tables), for the user of the token that
`custody login` kept (or CUSTODY_TOKEN, or `login()` here); the service decides and records what
needs deciding, with channel `api`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from governance.errors import InvalidInput
from governance.service.client import ServiceClient
from governance.zones import AssetKey, VersionRef

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from governance.approval import Applied, HistoryEntry
    from governance.frames import AssetCard, Frame
    from governance.lineage.pictures import LineageGraph

# The versions the service sends a page at a time, at the most.
VERSIONS_PAGE = 1000


class RemoteCustody:
    """The catalog, lineage, ledger, access and rows, as the service at `client.url` answers them."""

    def __init__(self, client: ServiceClient):
        self.client = client

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> RemoteCustody | None:
        client = ServiceClient.from_environ(environ)
        return None if client is None else cls(client)

    def login(self, user: str, password: str) -> str:
        """Get a token for `user`, proven by their directory password, kept as `custody login` keeps it."""
        return str(self.client.login(user, password)["user"])

    def whoami(self) -> str:
        """The user the token is for: every request acts for them."""
        return str(self.client.get("/whoami")["user"])

    def catalog(
        self,
        search: str | None = None,
        *,
        domain: str | None = None,
        classification: str | None = None,
        owner: str | None = None,
    ) -> Frame:
        from governance.catalog.entries import AssetEntry
        from governance.frames import catalog_frame

        asked = {"search": search, "domain": domain, "classification": classification, "owner": owner}
        return catalog_frame([AssetEntry.from_dict(entry) for entry in self.client.get("/catalog", asked)])

    def asset(self, key: str) -> AssetCard:
        from governance.catalog.listing import AssetDetail
        from governance.frames import AssetCard

        return AssetCard(AssetDetail.from_dict(self.client.get(f"/assets/{AssetKey.parse(key)}")))

    def versions(self, key: str) -> Frame:
        """Every version of the asset, purged ones too, oldest first."""
        from governance.catalog.models import VersionRow
        from governance.frames import versions_frame

        path, rows = f"/assets/{AssetKey.parse(key)}/versions", []
        page = self.client.get(path, {"limit": VERSIONS_PAGE})
        while page:
            rows.extend(page)
            page = self.client.get(path, {"limit": VERSIONS_PAGE, "before": page[-1]["number"]})
        return versions_frame(VersionRow.model_validate(row) for row in sorted(rows, key=lambda row: row["number"]))

    def provenance(self, ref: str, depth: int | None = None) -> LineageGraph:
        return self._graph(ref, depth=depth)

    def impact(self, ref: str, depth: int | None = None) -> LineageGraph:
        return self._graph(ref, impact=True, depth=depth)

    def columns(self, ref: str, column: str) -> LineageGraph:
        return self._graph(ref, column=column)

    def _graph(self, ref: str, **how: Any) -> LineageGraph:
        from governance.lineage.pictures import LineageGraph

        parsed = VersionRef.parse(ref)
        drawn = self.client.get(f"/versions/{parsed.key}/{parsed.number}/graph", {"format": "json", **how})
        return LineageGraph.from_dict(drawn)

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
        """Ledger entries, oldest first, that match every filter given: for the auditor and admin
        groups, as `read` decides who asks."""
        from governance import ledger
        from governance.frames import ledger_frame

        self._acting_as(as_user, password)
        where = ledger.LedgerFilter.asked(
            asset=asset,
            version=version,
            actor=actor,
            action=action,
            run_id=run_id,
            since=since,
            until=until,
            limit=limit,
        )
        return ledger_frame(ledger.entry_from_dict(entry) for entry in self.client.ledger(where))

    def readers(
        self, ref: str, *, depth: int | None = None, as_user: str | None = None, password: str | None = None
    ) -> Frame:
        """Everyone who read the version, or a version built from it: for the auditor and admin groups."""
        from governance.frames import readers_frame

        self._acting_as(as_user, password)
        parsed = VersionRef.parse(ref)
        return readers_frame(self.client.get(f"/versions/{parsed.key}/{parsed.number}/readers", {"depth": depth}))

    def access(self, key: str) -> Frame:
        from governance.access.views import AccessView
        from governance.frames import access_frame

        return access_frame(AccessView.from_dict(self.client.get(f"/access/{AssetKey.parse(key)}")))

    def read(
        self,
        target: str,
        *,
        as_user: str | None = None,
        password: str | None = None,
        limit: int | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """The version's rows as an Arrow table, for the token's user (`as_user`, if given, must be
        them; with `password`, `as_user` logs in first). Without `limit`, every row, as long as the
        service sends them all in one answer."""
        from governance.access.reads import Target
        from governance.service.api import MAX_ROWS

        self._acting_as(as_user, password)
        parsed = Target.parse(target)
        ref, total, table = self.client.rows(
            str(parsed.key), parsed.number, MAX_ROWS if limit is None else limit, list(columns or []) or None
        )
        if limit is None and table.num_rows < total:
            raise InvalidInput(
                f"{ref} has {total:,} rows, more than the {MAX_ROWS:,} the service sends at once: "
                "read fewer with limit=, or in process with Spark next to the lake"
            )
        return table

    def read_spark(
        self, spark: SparkSession, target: str, *, as_user: str | None = None, password: str | None = None
    ) -> DataFrame:
        """The version as a Spark DataFrame, made from the rows the service sends."""
        return spark.createDataFrame(self.read(target, as_user=as_user, password=password).to_pandas())

    def apply_specs(
        self, assets: Sequence[str] = (), *, as_user: str | None = None, password: str | None = None
    ) -> list[Applied]:
        """Put the edited specs the service reads in force, all or none, for the token's user: an owner of each."""
        from governance.approval import Applied

        self._acting_as(as_user, password)
        applied = self.client.send("POST", "/specs/apply", {"assets": [str(AssetKey.parse(a)) for a in assets]})
        return [Applied.from_dict(done) for done in applied]

    def _acting_as(self, user: str | None, password: str | None) -> None:
        """A request for `user`: proven by `password` (a login), else the token must be theirs."""
        if password is not None:
            if user is None:
                raise InvalidInput("a password proves a user: name them with as_user")
            self.login(user, password)
        self.client.acting_as(user, "as_user")

    def spec_history(self, asset: str) -> list[HistoryEntry]:
        from governance.approval import HistoryEntry

        return [HistoryEntry(**entry) for entry in self.client.get(f"/specs/{AssetKey.parse(asset)}/history")]
