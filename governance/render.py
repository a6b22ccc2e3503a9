"""How the CLI shows things to people: rich tables and trees."""

from __future__ import annotations

import json

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from governance.catalog.models import Criticality, LedgerEntry, VersionRow, VersionStatus
from governance.lineage.graph import Direction, Lineage, VersionNode


def short(value: str | None, width: int = 12) -> str:
    return (value or "")[:width]


def versions_table(asset: str, rows: list[VersionRow]) -> Table:
    table = Table(title=f"Versions of {asset}", title_justify="left")
    for column in ("version", "label", "created (UTC)", "rows", "quarantined", "data_version", "requested by", "run", "state"):
        table.add_column(column, justify="right" if column in ("version", "rows", "quarantined") else "left")
    for row in rows:
        table.add_row(
            str(row.number), row.label or "", row.created_at.strftime("%Y-%m-%d %H:%M:%S"), f"{row.rows:,}",
            f"{row.rows_quarantined:,}", short(row.data_version), row.requested_by, short(row.run_id, 8),
            _state(row),
        )
    return table


def _state(row: VersionRow) -> str:
    parts = [] if row.status == VersionStatus.COMMITTED else [row.status]
    if row.criticality == Criticality.CRITICAL:
        parts.append(Criticality.CRITICAL.value)
    return ", ".join(parts)


def lineage_tree(lineage: Lineage) -> Tree:
    """Provenance or impact as a tree; a version met again is named, not expanded again."""
    tree = Tree(_node_label(lineage.root))
    _grow(tree, lineage.root, lineage.direction)
    return tree


def _grow(branch: Tree, node: VersionNode, direction: Direction) -> None:
    for source in node.sources:
        branch.add(f"[dim]file[/] {escape(source.path)}  [dim]{source.bytes:,} B  sha256 {short(source.sha256, 16)}[/]")
    for child in node.links:
        if child.expanded_elsewhere:
            branch.add(f"[bold]{child.ref}[/] [dim](expanded elsewhere in this tree)[/]")
        else:
            _grow(branch.add(_node_label(child)), child, direction)
    if node.truncated:
        more = "inputs" if direction is Direction.UPSTREAM else "dependents"
        branch.add(f"[dim]… deeper {more} not shown (raise --depth)[/]")


def _node_label(node: VersionNode) -> str:
    label = f" label {escape(node.label)}" if node.label else ""
    if node.label and node.label_from:
        label += f" [dim](from {node.label_from})[/]"
    batch = f" batch {escape(node.batch)}" if node.batch else ""
    flags = "".join(
        f" [{style}]{text}[/]"
        for text, style, shown in (
            ("PURGED", "red", node.status == VersionStatus.PURGED),
            ("PURGING", "red", node.status == VersionStatus.PURGING),
            ("CRITICAL", "bold yellow", node.criticality == Criticality.CRITICAL),
            ("protected", "yellow", node.protected and node.criticality != Criticality.CRITICAL),
        )
        if shown
    )
    return (
        f"[bold]{node.ref}[/]{label} [dim]{node.zone}[/]{flags}  rows {node.rows:,}"
        f"{f' (+{node.rows_quarantined:,} quarantined)' if node.rows_quarantined else ''}\n"
        f"[dim]data_version {short(node.data_version, 16)}  created {node.created_at[:19]}  run {short(node.run_id, 8)}  "
        f"code {escape(node.code_version)}  spec {short(node.spec_hash, 12)}  "
        f"requested by {escape(node.requested_by)} ({node.assurance}){batch}[/]"
    )


def ledger_lines(entries: list[LedgerEntry]) -> list[str]:
    """One line per entry, oldest first, like a log."""
    lines = []
    for entry in entries:
        target = entry.asset_key or "-"
        if entry.version is not None:
            target += f"@{entry.version}"
        run = f" run {short(entry.run_id, 8)}" if entry.run_id else ""
        lines.append(f"{entry.seq:>6}  {entry.ts[:19].replace('T', ' ')}  {entry.actor:<12} {entry.action:<26} {target}{run}  {_details(entry.details)}")
    return lines


def _details(raw: str, width: int = 80) -> str:
    data = json.loads(raw)
    text = ", ".join(f"{k}={v}" for k, v in data.items() if v not in (None, "", [], {}))
    return text if len(text) <= width else text[: width - 1] + "…"


def stdout_console() -> Console:
    return Console(highlight=False, soft_wrap=False)
