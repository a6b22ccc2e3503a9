"""How the CLI shows things to people: rich tables and trees."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from governance.catalog.models import LedgerEntry, VersionRow
from governance.lineage.graph import ProvenanceNode


def short(value: str | None, width: int = 12) -> str:
    return (value or "")[:width]


def versions_table(asset: str, rows: list[VersionRow]) -> Table:
    table = Table(title=f"Versions of {asset}", title_justify="left")
    for column in ("version", "label", "created (UTC)", "rows", "quarantined", "data_version", "requested by", "run"):
        table.add_column(column, justify="right" if column in ("version", "rows", "quarantined") else "left")
    for row in rows:
        table.add_row(
            str(row.number), row.label or "", row.created_at.strftime("%Y-%m-%d %H:%M:%S"), f"{row.rows:,}",
            f"{row.rows_quarantined:,}", short(row.data_version), row.requested_by, short(row.run_id, 8),
        )
    return table


def provenance_tree(node: ProvenanceNode) -> Tree:
    tree = Tree(_node_label(node))
    _grow(tree, node)
    return tree


def _grow(branch: Tree, node: ProvenanceNode) -> None:
    for source in node.sources:
        branch.add(f"[dim]file[/] {source.path}  [dim]{source.bytes:,} B  sha256 {short(source.sha256, 16)}[/]")
    for child in node.inputs:
        _grow(branch.add(_node_label(child)), child)
    if node.truncated:
        branch.add("[dim]… deeper inputs not shown (raise --depth)[/]")


def _node_label(node: ProvenanceNode) -> str:
    label = f" label {node.label}" if node.label else ""
    batch = f" batch {node.batch}" if node.batch else ""
    return (
        f"[bold]{node.ref}[/]{label} [dim]{node.zone}[/]  rows {node.rows:,}"
        f"{f' (+{node.rows_quarantined:,} quarantined)' if node.rows_quarantined else ''}\n"
        f"[dim]data_version {short(node.data_version, 16)}  created {node.created_at[:19]}  run {short(node.run_id, 8)}  "
        f"code {node.code_version}  spec {short(node.spec_hash, 12)}  requested by {node.requested_by}{batch}[/]"
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
