"""A lineage as an auditor reads it: a tree of versions, or the summary of one too large to show.
Plain values, which the CLI also builds from the service's answers without loading a database
library."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from governance.foreign.nodes import ForeignRunNode
from governance.lineage.terms import Direction

# Where an impact's version lists the foreign runs that read it.
FOREIGN_KEY = "foreign_jobs"


@dataclass(frozen=True)
class Source:
    path: str
    bytes: int
    sha256: str


@dataclass
class VersionNode:
    """One version with what an auditor asks about it; `links` are its inputs or its dependents."""

    asset: str
    version: int
    label: str | None
    label_from: str | None
    data_version: str
    created_at: str
    run_id: str | None
    code_version: str
    spec_hash: str
    requested_by: str
    assurance: str
    zone: str
    rows: int
    rows_quarantined: int
    path: str
    status: str
    purged_at: str | None
    criticality: str
    protected: bool
    depth: int
    batch: str | None = None
    # The database read a landing version was ingested from (see `RelationalRead`), instead of a batch.
    read: dict[str, Any] | None = None
    # The topic's offsets a landing version holds, and who could write them (see `governance.streams.provenance`).
    stream: dict[str, Any] | None = None
    sources: list[Source] = field(default_factory=list)
    links: list[VersionNode] = field(default_factory=list)
    # The runs of jobs Custody does not run (their OpenLineage events): in an impact, those that read
    # this version; in a provenance, those that wrote the DropZone files it was ingested from.
    foreign: list[ForeignRunNode] = field(default_factory=list)
    truncated: bool = False
    expanded_elsewhere: bool = False

    @property
    def ref(self) -> str:
        return f"{self.asset}@{self.version}"

    def walk(self) -> Iterator[VersionNode]:
        """This node and every node below it, each occurrence once."""
        yield self
        for link in self.links:
            yield from link.walk()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], children_key: str = "inputs") -> VersionNode:
        """The node `to_dict` gave, with the nodes below it, as the service sends it."""
        fields = {k: v for k, v in data.items() if k not in ("sources", children_key, FOREIGN_KEY)}
        return cls(
            **fields,
            sources=[Source(**source) for source in data.get("sources", ())],
            links=[cls.from_dict(link, children_key) for link in data.get(children_key, ())],
            foreign=[ForeignRunNode.from_dict(run) for run in data.get(FOREIGN_KEY, ())],
        )

    def to_dict(self, children_key: str = "inputs") -> dict[str, Any]:
        return self._dict(children_key, [node.to_dict(children_key) for node in self.links])

    def flat_dict(self, children_key: str, next_refs: list[str]) -> dict[str, Any]:
        """The node alone, naming its next hops by ref: as `stream` gives it."""
        out = self._dict(children_key, next_refs)
        del out["expanded_elsewhere"]
        return out

    def _dict(self, children_key: str, children: list[Any]) -> dict[str, Any]:
        out = self.__dict__.copy()  # in the fields' order, and at C's pace: a lineage may hold 100,000
        del out["sources"], out["links"], out["foreign"]
        out[children_key] = children
        if self.zone == "landing":
            out["sources"] = [source.__dict__ for source in self.sources]
        out[FOREIGN_KEY] = [run.to_dict() for run in self.foreign]
        return out


@dataclass(frozen=True)
class Lineage:
    """A tree of versions from one root, in one direction."""

    root: VersionNode
    direction: Direction
    versions: int

    def to_dict(self) -> dict[str, Any]:
        return self.root.to_dict(self.direction.children_key)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], direction: Direction) -> Lineage | LineageSummary:
        """The lineage or summary `to_dict` gave, as the service sends it."""
        if data.get("complete") is False:
            counts = tuple((c["asset"], c["depth"], c["versions"]) for c in data["summary"])
            return LineageSummary(data["root"], direction, data["versions"], counts)
        root = VersionNode.from_dict(data, direction.children_key)
        return cls(root, direction, len({node.ref for node in root.walk()}))


@dataclass(frozen=True)
class LineageSummary:
    """What a lineage too large to show holds: how many versions of each asset, at each depth."""

    root: str
    direction: Direction
    versions: int
    counts: tuple[tuple[str, int, int], ...]  # asset, depth, versions

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "direction": self.direction.value,
            "versions": self.versions,
            "complete": False,
            "summary": [{"asset": asset, "depth": depth, "versions": count} for asset, depth, count in self.counts],
        }
