"""Provenance: the upstream tree of a version, down to the DropZone files it came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from governance.catalog import Catalog
from governance.catalog.models import VersionRow
from governance.zones import VersionRef

MAX_DEPTH = 100


@dataclass(frozen=True)
class Source:
    path: str
    bytes: int
    sha256: str


@dataclass
class ProvenanceNode:
    asset: str
    version: int
    label: str | None
    data_version: str
    created_at: str
    run_id: str | None
    code_version: str
    spec_hash: str
    requested_by: str
    zone: str
    rows: int
    rows_quarantined: int
    path: str
    batch: str | None = None
    inputs: list[ProvenanceNode] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    truncated: bool = False

    @property
    def ref(self) -> str:
        return f"{self.asset}@{self.version}"

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("inputs", "sources")}
        out["inputs"] = [node.to_dict() for node in self.inputs]
        if self.zone == "landing":
            out["sources"] = [source.__dict__ for source in self.sources]
        return out


def provenance(catalog: Catalog, ref: VersionRef, depth: int | None = None) -> ProvenanceNode:
    """The version and everything upstream of it, `depth` levels deep (all of it by default)."""
    limit = MAX_DEPTH if depth is None else min(depth, MAX_DEPTH)
    row = catalog.version(ref)
    root = _node(row)
    level: dict[int, list[ProvenanceNode]] = {row.id: [root]}
    for current in range(limit + 1):
        _attach_sources(catalog, level)
        if current == limit:
            _mark_truncated(level)
            break
        level = _expand(catalog, level)
        if not level:
            break
    return root


def _expand(catalog: Catalog, level: dict[int, list[ProvenanceNode]]) -> dict[int, list[ProvenanceNode]]:
    """Attach each node's inputs; return the next level keyed by version id."""
    inputs = catalog.inputs_of(list(level))
    next_level: dict[int, list[ProvenanceNode]] = {}
    for version_id, nodes in level.items():
        for row in inputs[version_id]:
            for node in nodes:
                child = _node(row)
                node.inputs.append(child)
                next_level.setdefault(row.id, []).append(child)
    return next_level


def _mark_truncated(level: dict[int, list[ProvenanceNode]]) -> None:
    for nodes in level.values():
        for node in nodes:
            node.truncated = node.zone != "landing"


def _attach_sources(catalog: Catalog, level: dict[int, list[ProvenanceNode]]) -> None:
    landing = [vid for vid, nodes in level.items() if nodes[0].zone == "landing"]
    if not landing:
        return
    for version_id, (batch, files) in catalog.sources_of(landing).items():
        for node in level[version_id]:
            node.batch = batch.batch_id
            node.sources = [Source(f.path, f.bytes, f.sha256) for f in files]


def _node(row: VersionRow) -> ProvenanceNode:
    return ProvenanceNode(
        asset=row.asset_key, version=row.number, label=row.label, data_version=row.data_version,
        created_at=row.created_at.isoformat(), run_id=row.run_id, code_version=row.code_version,
        spec_hash=row.spec_hash, requested_by=row.requested_by, zone=row.zone, rows=row.rows,
        rows_quarantined=row.rows_quarantined, path=row.path,
    )
