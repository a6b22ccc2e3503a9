"""How the CLI shows things to people: rich tables and trees."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from html import escape as escape_html
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len
from rich.console import Console, Group, JustifyMethod, RenderableType
from rich.markup import escape as escape_markup
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from governance.catalog.ledgerfilter import SHORTEST_RUN_PREFIX
from governance.catalog.states import Criticality, VersionStatus
from governance.checkpoints import KEY_VARIABLE
from governance.errors import printable, shown
from governance.foreign.groups import Grouped, JobGroup, ParentGroup, duration, grouped
from governance.lineage.columns import Edge, Kind, Transformation
from governance.lineage.terms import Direction

# What is shown is given, never queried, here: the catalog's and lineage's modules (and their
# database libraries) are loaded by the commands that ask, not by `custody --help`.
if TYPE_CHECKING:
    import pyarrow as pa

    from governance.access.views import AccessView, MembershipChange
    from governance.catalog.entries import AssetEntry, VersionLine
    from governance.catalog.listing import AssetDetail
    from governance.catalog.models import VersionRow
    from governance.foreign.nodes import ForeignRunNode
    from governance.ledger import Verification
    from governance.lineage.nodes import Lineage, LineageSummary, VersionNode


def escape(text: str) -> str:
    """Data or a name for a place that reads markup: shown as it is, unprintable characters escaped."""
    return escape_markup(printable(text, keep="\n"))


def short(value: str | None, width: int = 12) -> str:
    return (value or "")[:width]


class RunIds:
    """Run ids as printed together: each by its first SHORTEST_RUN_PREFIX characters, or by as
    many more as tell it from every other id printed with it, as git shortens commit ids. (Other
    tools' run ids are UUIDv7s, whose first eight digits change about once a minute.)"""

    def __init__(self, ids: Iterable[str | None]):
        unique = sorted({run for run in ids if run})
        self._widths: dict[str, int] = {}
        for i, run in enumerate(unique):
            # Of ids in order, the neighbours share the longest beginning with it.
            shared = max((_shared(run, unique[j]) for j in (i - 1, i + 1) if 0 <= j < len(unique)), default=0)
            self._widths[run] = max(SHORTEST_RUN_PREFIX, shared + 1)

    def __call__(self, run: str | None) -> str:
        return short(run, self._widths.get(run or "", SHORTEST_RUN_PREFIX))


def _shared(one: str, other: str) -> int:
    return next((i for i, (a, b) in enumerate(zip(one, other, strict=False)) if a != b), min(len(one), len(other)))


# Each version column: how it is aligned, and its cell for a version (Text: data is never markup).
VERSION_COLUMNS: dict[str, tuple[JustifyMethod, Callable[[VersionLine | VersionRow], Text]]] = {
    "version": ("right", lambda row: Text(str(row.number))),
    "label": ("left", lambda row: Text(printable(row.label or ""))),
    "created (UTC)": ("left", lambda row: Text(row.created_at.strftime("%Y-%m-%d %H:%M:%S"))),
    "rows": ("right", lambda row: Text(f"{row.rows:,}")),
    "quarantined": ("right", lambda row: Text(f"{row.rows_quarantined:,}")),
    "data_version": ("left", lambda row: Text(short(row.data_version))),
    "requested by": ("left", lambda row: Text(printable(row.requested_by))),
    "run": ("left", lambda row: Text(short(row.run_id, SHORTEST_RUN_PREFIX))),
    "state": ("left", lambda row: Text(_state(row))),
}
# On a narrow terminal these give way, first to last, rather than every cell being cut short; a
# column with nothing in it on the page (no label, none quarantined, all committed) goes first.
GIVE_WAY = ("run", "data_version", "quarantined", "label")
SAYS_NOTHING = frozenset({"", "0"})
# A cell's padding on either side and the rule after it, in rich's default table.
PADDED = 3
# What is left when every other column gave way wraps rather than being cut.
FOLDED = frozenset({"label", "requested by"})


def versions_table(
    asset: str, rows: Sequence[VersionLine | VersionRow], total: int | None = None, width: int | None = None
) -> Group:
    """A page of versions, then which of `total` they are and how to see older ones. Within
    `width`, as far as it goes, the columns that give way are left out, and a line says which.
    The lines below the table are their own: a caption would wrap at the table's width."""
    if not rows:
        return Group(Text(f"Versions of {asset}"), Text(_page_caption(rows, total) or "no version yet"))
    cells = {name: [cell(row) for row in rows] for name, (_, cell) in VERSION_COLUMNS.items()}
    widths = {
        name: max([cell_len(name), *(text.cell_len for text in values)]) + PADDED for name, values in cells.items()
    }
    empty = [name for name in ("label", "quarantined", "state") if {text.plain for text in cells[name]} <= SAYS_NOTHING]
    shown, dropped = list(VERSION_COLUMNS), []
    for name in dict.fromkeys([*empty, *GIVE_WAY]):
        if width is None or 1 + sum(widths[n] for n in shown) <= width:
            break
        shown.remove(name)
        dropped.append(name)
    table = Table(title=f"Versions of {asset}", title_justify="left")
    for name in shown:
        table.add_column(
            name,
            justify=VERSION_COLUMNS[name][0],
            no_wrap=name not in FOLDED,
            overflow="fold" if name in FOLDED else "ellipsis",
        )
    for row_cells in zip(*(cells[name] for name in shown)):
        table.add_row(*row_cells)
    nothing = [name for name in dropped if name in empty]
    narrow = [name for name in dropped if name not in empty]
    notes = [
        _page_caption(rows, total),
        f"not shown, with nothing in them on this page: {', '.join(nothing)}" if nothing else None,
        f"not shown at this width: {', '.join(narrow)}" if narrow else None,
    ]
    return Group(table, *(Text(note) for note in notes if note))


def _page_caption(rows: Sequence[VersionLine | VersionRow], total: int | None) -> str | None:
    if total is None or len(rows) == total:
        return None
    if not rows:
        return f"no versions on this page, of {total:,}"
    first = rows[0].number
    older = f"; older: --before {first}" if first > 1 else ""
    return f"versions {first}-{rows[-1].number}, {len(rows):,} of {total:,}{older}"


def _state(row: VersionLine | VersionRow) -> str:
    parts = [] if row.status == VersionStatus.COMMITTED else [row.status]
    if row.criticality == Criticality.CRITICAL:
        parts.append(Criticality.CRITICAL.value)
    return ", ".join(parts)


def lineage_summary(summary: LineageSummary) -> Group:
    """Versions per asset and depth, for a lineage too large to read as a tree. The lines around the
    table are its own, not its title and caption: those would wrap at the narrow table's width."""
    what = "Provenance" if summary.direction is Direction.UPSTREAM else "Impact"
    table = Table()
    for column in ("depth", "asset", "versions"):
        table.add_column(column, justify="left" if column == "asset" else "right")
    for asset, depth, count in summary.counts:
        table.add_row(str(depth), escape(asset), f"{count:,}")
    return Group(
        Text(f"{what} of {summary.root}: {summary.versions:,} versions"),
        table,
        Text("too many to show as a tree: --all shows it whole, --depth K a part"),
    )


def lineage_tree(lineage: Lineage, every_run: bool = False) -> Tree:
    """Provenance or impact as a tree; a version met again is named, not expanded again. Other
    tools' runs of a version's impact are grouped by job (see governance.foreign.groups), or with
    `every_run`, shown one by one."""
    runs = RunIds(_tree_runs(lineage.root))
    tree = Tree(_node_label(lineage.root, runs))
    _grow(tree, lineage.root, lineage.direction, runs, every_run)
    return tree


def _tree_runs(node: VersionNode) -> Iterator[str | None]:
    """The run ids the tree under `node` prints."""
    yield node.run_id
    for child in node.links:
        yield from _tree_runs(child)
    for run in node.foreign:
        yield from _foreign_runs(run)


def _foreign_runs(run: ForeignRunNode) -> Iterator[str]:
    yield run.run_id
    for output in run.outputs:
        for reader in output.read_by:
            yield from _foreign_runs(reader)


def _grow(branch: Tree, node: VersionNode, direction: Direction, runs: RunIds, every_run: bool) -> None:
    if node.read:
        branch.add(_read_label(node.read))
    if node.stream:
        branch.add(_stream_label(node.stream))
    for source in node.sources:
        branch.add(f"[dim]file[/] {escape(source.path)}  [dim]{source.bytes:,} B  sha256 {short(source.sha256, 16)}[/]")
    for child in node.links:
        if child.expanded_elsewhere:
            branch.add(f"[bold]{child.ref}[/] [dim](expanded elsewhere in this tree)[/]")
        else:
            _grow(branch.add(_node_label(child, runs)), child, direction, runs, every_run)
    if direction is Direction.DOWNSTREAM and not every_run:
        _grow_jobs(branch, grouped(node.foreign), runs)
    for run in node.foreign if direction is Direction.UPSTREAM or every_run else ():
        if direction is Direction.UPSTREAM:
            _grow_writer(branch, run, runs)
        else:
            _grow_foreign(branch, run, runs)
    if node.truncated:
        more = "inputs" if direction is Direction.UPSTREAM else "dependents"
        branch.add(f"[dim]… deeper {more} not shown (raise --depth)[/]")


def _grow_foreign(branch: Tree, run: ForeignRunNode, runs: RunIds) -> None:
    """A foreign run that read the version above it, what it wrote, and who read that."""
    if run.expanded_elsewhere:
        branch.add(
            f"[magenta]job {escape(run.job)}[/] run {runs(run.run_id)} [dim](expanded elsewhere in this tree)[/]"
        )
        return
    twig = branch.add(_foreign_label(run, runs))
    for output in run.outputs:
        version = f" [dim]version {escape(output.version)}[/]" if output.version else ""
        wrote = twig.add(f"[magenta]wrote[/] {escape(output.name)} [dim]in {escape(output.namespace)}[/]{version}")
        _add_foreign_columns(wrote, output.columns)
        for reader in output.read_by:
            _grow_foreign(wrote, reader, runs)


def _grow_jobs(branch: Tree, groups: Sequence[Grouped], runs: RunIds) -> None:
    """Other tools' jobs whose runs read what is above them: each with its runs counted, its last
    run and last failure, what they wrote and the jobs that read that; under a parent job, its own."""
    for group in groups:
        if isinstance(group, JobGroup):
            _grow_job(branch, group, runs)
            continue
        twig = branch.add(_parent_label(group, runs))
        if group.own is not None:
            _grow_written(twig, group.own, runs)
        _grow_jobs(twig, group.jobs, runs)


def _grow_job(branch: Tree, group: JobGroup, runs: RunIds) -> None:
    if group.expanded_elsewhere:
        count = f"{len(group.runs):,} run" + ("s" if len(group.runs) != 1 else "")
        branch.add(f"[magenta]job {escape(group.job)}[/] {count} [dim](expanded elsewhere in this tree)[/]")
        return
    _grow_written(branch.add(_job_label(group, runs)), group, runs)


def _grow_written(twig: Tree, group: JobGroup, runs: RunIds) -> None:
    for output in group.outputs:
        versions = f"  [dim]{len(output.versions):,} versions[/]" if len(output.versions) > 1 else ""
        version = f" [dim]version {escape(next(iter(output.versions)))}[/]" if len(output.versions) == 1 else ""
        by = f"  [dim]by {output.writers:,} runs[/]" if output.writers > 1 else ""
        wrote = twig.add(
            f"[magenta]wrote[/] {escape(output.name)} [dim]in {escape(output.namespace)}[/]{version}{versions}{by}"
        )
        _add_foreign_columns(wrote, output.columns)
        _grow_jobs(wrote, output.read_by, runs)


def _job_label(group: JobGroup, runs: RunIds) -> str:
    """A job's runs: one as it is; several counted by state, with the last and the last failure."""
    if len(group.runs) == 1:
        return _foreign_label(group.last, runs)
    states = ", ".join(f"{count:,} {state}" for state, count in group.states)
    label = (
        f"[magenta]job {escape(group.job)}[/] [dim]not run by Custody[/]  {len(group.runs):,} runs: {states}\n"
        f"[dim]last {_run_line(group.last, runs)}[/]"
    )
    failed = group.last_failure
    if failed is not None and failed is not group.last:
        label += f"\n[dim]last failed {_run_line(failed, runs)}[/]"
    return label


def _parent_label(group: ParentGroup, runs: RunIds) -> str:
    jobs = f"{len(group.jobs):,} job" + ("s" if len(group.jobs) != 1 else "")
    parents = f"{group.parent_runs:,} run" + ("s" if group.parent_runs != 1 else "")
    label = f"[magenta]job {escape(group.job)}[/] [dim]not run by Custody, parent of {jobs} in {parents}[/]"
    if group.own is not None:
        label += f"\n[dim]last {_run_line(group.own.last, runs)}[/]"
    return label


def _run_line(run: ForeignRunNode, runs: RunIds) -> str:
    """A run in a line: its id, state, start, end and how long it took, user, reporter and error."""
    took = duration(run)
    ended = f"  ended {run.ended_at[:19]}" + (f" ({took})" if took else "") if run.ended_at else ""
    user = escape(run.user) if run.user else "no user reported"
    error = f"\nerror: {escape(shown(run.error, ERROR_SHOWN))}" if run.error else ""
    return (
        f"run {runs(run.run_id)}  {run.state}  started {(run.started_at or '?')[:19]}{ended}  user {user}  "
        f"reported by {escape(run.reporter)}{error}"
    )


def foreign_run(found: Mapping[str, Any]) -> Group:
    """A run of another tool's job, as `custody lineage run` shows it."""
    lines = [
        Text.from_markup(
            f"[magenta]job {escape(found['job_namespace'])}/{escape(found['job_name'])}[/]  {found['state']}"
        ),
        Text(f"run {found['run_id']}"),
        Text(f"started {found['started_at'] or '?'}" + (f"  ended {found['ended_at']}" if found["ended_at"] else "")),
    ]
    if found["events_received"]:
        lines.append(
            Text(f"user {printable(found['user'] or 'not reported')}  reported by {printable(found['reporter'])}")
        )
        lines.append(Text(f"producer {printable(found['producer'])}"))
    if found["parent"]:
        parent = found["parent"]
        lines.append(
            Text(
                f"parent run {parent['run_id']} of job {printable(parent['job_namespace'])}/{printable(parent['job_name'])}"
            )
        )
    if found["error"]:
        lines.append(Text(f"error: {printable(found['error'])}"))
    tree = Tree(Text(f"{found['events_received']:,} events received"))
    for side, label in (("inputs", "read"), ("outputs", "wrote")):
        for dataset in found[side]:
            tree.add(Text(f"{label} {_dataset_line(dataset)}"))
    for child in found["children"]:
        tree.add(Text(f"parent of run {child['run_id']} of {printable(child['job_name'])}  {child['state']}"))
    return Group(*lines, tree)


def _dataset_line(dataset: Mapping[str, Any]) -> str:
    said = f"{printable(dataset['name'])} in {printable(dataset['namespace'])}"
    if dataset.get("version"):
        said += f" version {printable(dataset['version'])}"
    if dataset.get("custody"):
        said += f"  = {dataset['custody']}"
    if dataset.get("waiting_for"):
        said += f"  waiting for {dataset['waiting_for']}"
    return said


def foreign_jobs(found: Sequence[Mapping[str, Any]]) -> Table:
    """Other tools' jobs, as `custody lineage jobs` lists them."""
    table = Table()
    for column in ("job", "runs", "by state", "last run", "last state", "last active"):
        table.add_column(column, justify="right" if column == "runs" else "left")
    ids = RunIds(job["last_run"]["run_id"] for job in found if job["last_run"])
    for job in found:
        states = ", ".join(f"{count:,} {state}" for state, count in sorted(job["states"].items()))
        last = job["last_run"] or {"run_id": None, "state": "declared only" if job["declared"] else ""}
        table.add_row(
            Text(printable(f"{job['namespace']}/{job['name']}")),
            f"{job['runs']:,}",
            states,
            ids(last["run_id"]) if last["run_id"] else "",
            last["state"],
            (job["last_active"] or "")[:19],
        )
    return table


def foreign_dataset(found: Mapping[str, Any]) -> Group:
    """A dataset as other tools reported it, as `custody lineage dataset` shows it."""
    facets = ", ".join(sorted(found["facets"])) or "none"
    return Group(
        Text(f"{printable(found['name'])} in {printable(found['namespace'])}"),
        Text(f"read by {found['read_by_runs']:,} runs, written by {found['written_by_runs']:,}"),
        Text(f"{found['events_received']:,} dataset events received; facets: {printable(facets)} (--json shows them)"),
    )


def foreign_job_runs(found: Sequence[Mapping[str, Any]]) -> Table:
    """A job's runs, as `custody lineage runs` lists them."""
    table = Table()
    for column in ("run", "state", "started", "ended", "user", "error"):
        table.add_column(column)
    ids = RunIds(run["run_id"] for run in found)
    for run in found:
        table.add_row(
            ids(run["run_id"]),
            run["state"],
            (run["started_at"] or "")[:19],
            (run["ended_at"] or "")[:19],
            Text(printable(run["user"] or "")),
            Text(shown(run["error"] or "", 80)),
        )
    return table


# The most characters of a foreign run's error a tree shows; --json has them all.
ERROR_SHOWN = 200
# The columns of a foreign dataset a tree shows; --json has them all.
FOREIGN_COLUMNS_SHOWN = 8


def _add_foreign_columns(branch: Tree, columns: Mapping[str, Any] | None) -> None:
    """What the columns of a dataset a foreign run wrote derive from, as its column lineage said."""
    if not columns:
        return
    listed = [
        *columns["columns"].items(),
        *([("every column", columns["every_column"])] if columns["every_column"] else []),
    ]
    for name, inputs in listed[:FOREIGN_COLUMNS_SHOWN]:
        came = "; ".join(
            f"{_foreign_input(i)} [dim]({i['kind']} {i['transformation']}{' masking' if i['masking'] else ''})[/]"
            for i in inputs
        )
        branch.add(f"[cyan]{escape(name)}[/] ← {came}")
    if len(listed) > FOREIGN_COLUMNS_SHOWN:
        branch.add(f"[dim]… {len(listed) - FOREIGN_COLUMNS_SHOWN} more columns (--json shows all)[/]")


def _foreign_input(found: Mapping[str, Any]) -> str:
    where = f"[bold]{escape(found['version'])}[/]" if "version" in found else escape(found["name"])
    return f"{where}.{escape(found['field'])}"


def _grow_writer(branch: Tree, run: ForeignRunNode, runs: RunIds) -> None:
    """A foreign run that wrote what the version above it was ingested from, and what it read."""
    twig = branch.add(_foreign_label(run, runs))
    for output in run.outputs:
        wrote = twig.add(f"[magenta]wrote[/] {escape(output.name)} [dim]in {escape(output.namespace)}[/]")
        _add_foreign_columns(wrote, output.columns)
    for read in run.inputs:
        what = (
            f"[bold]{escape(read.custody)}[/]"
            if read.custody
            else f"{escape(read.name)} [dim]in {escape(read.namespace)}[/]"
        )
        twig.add(f"[magenta]read[/] {what}")


def _foreign_label(run: ForeignRunNode, runs: RunIds) -> str:
    return f"[magenta]job {escape(run.job)}[/] [dim]not run by Custody[/]\n[dim]{_run_line(run, runs)}[/]"


def _stream_label(stream: dict) -> str:
    ranges = ", ".join(_offsets(part) for part in stream["partitions"])
    times = [t for part in stream["partitions"] for t in (part["first_record_at"], part["last_record_at"]) if t]
    when = f"  [dim]records {min(times)[:19]} to {max(times)[:19]}[/]" if times else ""
    writers = ", ".join(escape(user) for user in stream["writers"]) or "nobody"
    return (
        f"[dim]topic[/] {escape(stream['topic'])}  [dim]partition:offsets[/] {ranges}{when}\n"
        f"[dim]could write it then[/] {writers}"
    )


def _offsets(part: dict) -> str:
    """A partition's offsets, first to last (both held), and the offsets lost before them."""
    first, end, follows = part["start_offset"], part["end_offset"], part["follows"]
    held = f"{first}-{end - 1}" if end > first else "none"
    lost = f" [red](offsets {follows}-{first - 1} lost)[/]" if follows is not None and follows < first else ""
    return f"{part['partition']}:{held}{lost}"


def _read_label(read: dict) -> str:
    marks = ""
    if read["incremental_column"]:
        start = f"after {read['high_water_from']} " if read["high_water_from"] else ""
        marks = f", {escape(read['incremental_column'])} {escape(start)}up to {escape(read['high_water_to'] or '')}"
    query = f"\n[dim]query[/] {escape(read['query'])}" if read["query"] else ""
    return (
        f"[dim]table[/] {escape(read['name'])}  [dim]{escape(read['namespace'])} as of "
        f"{read['snapshot_at'][:19]}{marks}[/]{query}"
    )


def _node_label(node: VersionNode, runs: RunIds) -> str:
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
        f"[dim]data_version {short(node.data_version, 16)}  created {node.created_at[:19]}  run {runs(node.run_id)}  "
        f"code {escape(node.code_version)}  spec {short(node.spec_hash, 12)}  "
        f"requested by {escape(node.requested_by)} ({node.assurance}){batch}[/]"
    )


NOT_RECORDED = "column lineage not recorded (committed before it was, or with CUSTODY_COLUMN_LINEAGE=off)"
NO_INPUT = "reads no input column: a literal or generated value, or left out (see the version's notes)"
OUTSIDE = "outside Custody: read by a job Custody does not run"


def column_overview(overview: Mapping[str, Any]) -> Table:
    """Each column of a version and the input columns it derives from, from its `to_dict()` (the
    service's answer, or the catalog's here)."""
    table = Table(title=f"Column lineage of {escape(overview['version'])}", title_justify="left")
    for column in ("column", "depends on", "how"):
        table.add_column(column)
    if not overview["recorded"]:
        table.caption = NOT_RECORDED
        return table
    for name, deps in overview["columns"].items():
        table.add_row(escape(name), *_dep_cells(deps))
    if overview["every_column"]:
        table.add_row("[italic]every column[/]", *_dep_cells(overview["every_column"]))
    notes = [f"approximate for {name}" for name in overview["fallbacks"]] + list(overview["notes"])
    table.caption = escape("; ".join(notes)) or None
    return table


def column_markdown(overview: Mapping[str, Any]) -> str:
    """Each column of a version and what it derives from, as a Markdown table, from the overview's
    `to_dict()`: for places that show Markdown but draw no column lineage, such as Dagster's UI."""
    if not overview["recorded"]:
        return NOT_RECORDED
    lines = ["| column | derives from | how |", "|---|---|---|"]
    cells = [(_md_code(name), deps) for name, deps in overview["columns"].items()]
    if overview["every_column"]:
        cells.append(("*every column*", overview["every_column"]))
    for cell, deps in cells:
        if not deps:
            lines.append(f"| {cell} | {NO_INPUT} | |")
        for dep in deps:
            lines.append(f"| {cell} | {_md_code(_source(dep))} | {_label(dep)} |")
    notes = [f"approximate for {name}" for name in overview["fallbacks"]] + list(overview["notes"])
    lines.extend(f"\n{_md_text(note)}" for note in notes)
    return "\n".join(lines)


def _md_code(text: str) -> str:
    """A name in a Markdown table cell: a pipe would end the cell, a backtick the code span."""
    return "`" + printable(text).replace("`", "\u02cb").replace("|", "\\|") + "`"


def _md_text(text: str) -> str:
    return printable(text).replace("|", "\\|")


def _dep_cells(deps: list[Mapping[str, Any]]) -> tuple[str, str]:
    if not deps:
        return f"[dim]{NO_INPUT}[/]", ""
    sources = [escape(_source(d)) for d in deps]
    return "\n".join(sources), "\n".join(_edge(d) for d in deps)


def _source(dep: Mapping[str, Any]) -> str:
    """The input column a dependency reads: of a version, a database table or the DropZone."""
    return f"{'DropZone' if dep['input'] == 'dropzone' else dep['input']}.{dep['column']}"


def _edge(edge: Mapping[str, Any]) -> str:
    style = "cyan" if edge["kind"] == "DIRECT" else "magenta"
    return f"[{style}]{_label(edge)}[/]"


def _label(edge: Mapping[str, Any]) -> str:
    return Edge(Kind(edge["kind"]), Transformation(edge["transformation"]), edge["masking"]).label


def _edges(node: Mapping[str, Any]) -> str:
    return ", ".join(_edge(e) for e in node.get("dependencies", ()))


def column_tree(root: Mapping[str, Any]) -> Tree:
    """A column and what it depends on, down to DropZone fields, from its `to_dict()`; a column met
    again is not expanded again."""
    tree = Tree(f"[bold]{escape(root['version'])}.{escape(root['column'])}[/]")
    _grow_column(tree, root)
    return tree


def _grow_column(branch: Tree, node: Mapping[str, Any]) -> None:
    if node.get("recorded") is False:
        branch.add(f"[dim]{NOT_RECORDED}[/]")
        return
    fields, inputs = node.get("dropzone", ()), node.get("inputs", ())
    if not fields and not inputs:
        branch.add(f"[dim]{NO_INPUT}[/]")
    for field in fields:
        _add_files(branch.add(f"{_edges(field)}  {_field_label(field['field'], field)}"), field)
    for child in inputs:
        label = f"{_edges(child)}  [bold]{escape(child['version'])}.{escape(child['column'])}[/]"
        if child.get("expanded_elsewhere"):
            branch.add(f"{label} [dim](expanded elsewhere in this tree)[/]")
        else:
            _grow_column(branch.add(label), child)


def _field_label(name: str, landed: Mapping[str, Any]) -> str:
    """A field of a DropZone batch, or a column of a database table, named with where it was read."""
    table = landed.get("table")
    if table is not None:
        return f"column [bold]{escape(name)}[/] [dim]of {escape(table['namespace'])} {escape(table['name'])} as of {table['snapshot_at'][:19]}[/]"
    batch = landed.get("batch")
    return f"DropZone field [bold]{escape(name)}[/]" + (f" [dim]of batch {escape(batch)}[/]" if batch else "")


def _add_files(branch: Tree, landed: Mapping[str, Any]) -> None:
    for f in landed.get("files", ()):
        branch.add(f"[dim]file[/] {escape(f['path'])}  [dim]{f['bytes']:,} B  sha256 {short(f['sha256'], 16)}[/]")


def origins_tree(found: Mapping[str, Any]) -> Tree:
    """Where a column's values begin, from the origins' dicts: the DropZone fields, with the files
    that held them."""
    from governance.lineage.column_trace import Ending

    tree = Tree(f"Origins of [bold]{escape(found['version'])}.{escape(found['column'])}[/]")
    for origin in found["origins"]:
        via = f"\n[magenta]through[/] {', '.join(escape(job) for job in origin['via'])}" if origin.get("via") else ""
        if "dropzone_field" in origin:
            label = f"[bold]{escape(origin['version'])}[/] {_field_label(origin['dropzone_field'], origin)}"
            _add_files(tree.add(f"{label}\n{_edges(origin)}{via}"), origin)
        elif "dataset" in origin:
            dataset = origin["dataset"]
            tree.add(
                f"{escape(dataset['name'])}.{escape(origin['column'])} [dim]in {escape(dataset['namespace'])} "
                f"({OUTSIDE})[/]\n{_edges(origin)}{via}"
            )
        else:
            why = NOT_RECORDED if origin["ends"] == Ending.NOT_RECORDED.value else NO_INPUT
            tree.add(
                f"[bold]{escape(origin['version'])}.{escape(origin['column'])}[/] [dim]({why})[/]\n"
                f"{_edges(origin)}{via}"
            )
    return tree


def readers_table(readers: Sequence[Mapping[str, Any]]) -> Table:
    """Who read each version (governance.lineage.readers), oldest first."""
    shown = Table(box=None)
    for name in ("version", "user", "how", "channel"):
        shown.add_column(name, no_wrap=True)
    shown.add_column("engine", min_width=10)
    shown.add_column("when", min_width=10)
    for reader in readers:
        when = str(reader["at"])[:16].replace("T", " ")
        # Iceberg's Java client names its commit too: the release is what a reader of the table needs.
        engine = str(reader["engine"] or "").partition(" (commit")[0]
        said = (reader["version"], reader["user"], reader["how"], reader["channel"], engine, when)
        shown.add_row(*(printable(str(value or "-")) for value in said))
    loaded = any(reader["how"] == "loaded" for reader in readers)
    shown.caption = (
        "no one has read it"
        if not readers
        else "loaded: the table was loaded while the version was its current one; which version was read is not known"
        if loaded
        else None
    )
    return shown


def ledger_lines(entries: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per entry as JSON gives it (`ledger.entry_dict`), oldest first, like a log."""
    listed = list(entries)
    runs = RunIds(entry["run_id"] for entry in listed)
    lines = []
    for entry in listed:
        target = entry["asset_key"] or "-"
        if entry["version"] is not None:
            target += f"@{entry['version']}"
        run = f" run {runs(entry['run_id'])}" if entry["run_id"] else ""
        who = f"{entry['actor']} ({entry['assurance']})" if entry["assurance"] else entry["actor"]
        lines.append(
            printable(
                f"{entry['seq']:>6}  {entry['ts'][:19].replace('T', ' ')}  {who:<22} {entry['action']:<26} {target}{run}  {_details(entry['details'])}"
            )
        )
    return lines


def _details(details: Mapping[str, Any], width: int = 120) -> str:
    data = dict(details)
    if "result" in data:  # a decision: its answer and why, then its channel and engine; its directory last
        first = {name: data.pop(name, None) for name in ("result", "reason", "channel", "engine", "via")}
        data = {**first, **data}
        data["directory"] = data.pop("directory", None)
    text = ", ".join(f"{k}={v}" for k, v in data.items() if v not in (None, "", [], {}))
    return text if len(text) <= width else text[: width - 1] + "…"


@dataclass(frozen=True)
class LedgerReport:
    """A ledger verification in the words `custody ledger verify` prints, as Jupyter shows it too:
    what held, what could not be verified and why, and the first thing that broke."""

    result: Verification
    checkpoint_file: Path | None  # None: the catalog keeps no checkpoints
    segments: Path | None = None
    unfinished: tuple[str, ...] = ()  # files an interrupted rollover left in `segments`

    @property
    def ok(self) -> bool:
        return self.result.ok

    def held(self) -> str | None:
        """What was verified, when nothing broke."""
        result = self.result
        if not result.ok:
            return None
        where = f" in {self.checkpoint_file}" if self.checkpoint_file else ""
        summary = f"{result.entries} entries, chain intact, {result.checkpoints} checkpoint(s) matched{where}"
        return f"ledger ok: {summary}" if result.checkpoints_verified else summary

    def notices(self) -> list[str]:
        """What could not be verified, and why."""
        notices = []
        if self.unfinished:
            notices.append(
                f"an interrupted rollover left {len(self.unfinished)} file(s) in {self.segments} "
                f"({', '.join(self.unfinished)}); the ledger reads right without them, and the next "
                "`custody ledger rollover` or `maintain` finishes or removes them"
            )
        if not self.result.checkpoints_verified:
            notices.append(f"checkpoints are not verified: {KEY_VARIABLE} is not set")
        return notices

    def failure(self) -> str | None:
        """The first thing that broke, on one line: whatever the chain does against broken
        checkpoints follows from them."""
        result = self.result
        if result.problems:
            more = len(result.problems) - 1
            also = [f"{more} more problem(s), all in --json"] if more else []
            if result.first_bad_seq is not None:
                also.append(f"the chain breaks at seq {result.first_bad_seq}: {result.reason}")
            return f"checkpoints cannot be trusted: {result.problems[0]}" + (f" ({'; '.join(also)})" if also else "")
        if result.first_bad_seq is not None:
            return f"ledger broken at seq {result.first_bad_seq}: {result.reason}"
        return None

    def lines(self) -> list[str]:
        held, failure = self.held(), self.failure()
        return [
            *([held] if held else []),
            *(f"notice: {notice}" for notice in self.notices()),
            *([f"error: {failure}"] if failure else []),
        ]

    def __str__(self) -> str:
        return "\n".join(self.lines())

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return "".join(f"<p>{escape_html(line)}</p>" for line in self.lines())


def rows_table(ref: str, table: pa.Table, total: int) -> Table:
    shown = Table(title=f"{ref}: {table.num_rows:,} of {total:,} rows", title_justify="left")
    for name in table.column_names:
        shown.add_column(escape(name))
    for record in table.to_pylist():
        shown.add_row(*(escape("" if value is None else str(value)) for value in record.values()))
    return shown


def access_table(view: AccessView) -> Table:
    rules = (
        [view.classification]
        + (["pii"] if view.pii else [])
        + (["verified identity required"] if view.needs_verified else [])
    )
    table = Table(
        title=f"Access to {view.asset} ({', '.join(rules)})",
        title_justify="left",
        caption=escape(
            f"purge and policy settings: admin group {view.admin_group} ({', '.join(view.admins) or 'no members'}); "
            f"auditors: {view.auditor_group} ({', '.join(view.auditors) or 'no members'})"
        ),
        caption_justify="left",
    )
    for column in ("role", "group", "members", "may"):
        table.add_column(column)
    for role in view.roles:
        table.add_row(role.role, escape(role.group), escape(", ".join(role.members)) or "-", ", ".join(role.may))
    return table


def decisions_table(explained: Mapping[str, Any]) -> Table:
    """What `custody access check --json` says, as a table."""
    table = Table(title=escape(f"What {explained['user']} may do to {explained['asset']}"), title_justify="left")
    for column in ("action", "result", "why"):
        table.add_column(column)
    for decision in explained["decisions"]:
        table.add_row(decision["action"], decision["result"], escape(decision["reason"]))
    return table


def membership_lines(change: MembershipChange) -> list[str]:
    moved = "added to" if change.verb == "grant" else "removed from"
    if change.changed:
        lines = [f"{change.user} {moved} {change.group}: {change.role} of {change.asset}"]
    else:
        state = "already in" if change.verb == "grant" else "was not a direct member of"
        lines = [f"{change.user} {state} {change.group}: nothing changed"]
    if change.shared_with:
        lines.append(f"the group holds roles on {', '.join(change.shared_with)} too")
    if change.still_member:
        lines.append(f"{change.user} is still in {change.group} through a nested group: revoke it there")
    return lines


def spec_edits(edits: list[dict]) -> Text:
    if not edits:
        return Text("the spec files are the definitions in force: nothing to apply")
    text = Text()
    for edit in edits:
        if edit["retired"]:
            where = f"file gone, in force {short(edit['old_hash'])}"
        else:
            hashes = (
                f"new, {short(edit['new_hash'])}"
                if edit["new"]
                else f"{short(edit['old_hash'])} -> {short(edit['new_hash'])}"
            )
            where = f"{edit['file']}, {hashes}"
        text.append(printable(f"{edit['asset']}  ({where})"), style="bold")
        text.append("".join(f"\n  {printable(line)}" for line in edit["changes"]))
        text.append("".join(f"\n  => {printable(line)}" for line in edit["implications"]), style="dim")
        text.append("\n")
    return text


def spec_comparison(data: dict) -> Text:
    text = Text(f"{data['asset']}  {short(data['from'])} -> {short(data['to'])}", style="bold")
    text.append("".join(f"\n  {printable(line)}" for line in data["changes"]) or "\n  the same spec")
    return text


def spec_applications(applied: list[dict]) -> Text:
    if not applied:
        return Text("the spec files are the definitions in force: nothing to apply")
    text = Text()
    for done in applied:
        git = done["git"]
        commit = f", commit {short(str(git['commit']))} by {git['author']}" if "commit" in git else ""
        edited = " (file edited since that commit)" if git.get("uncommitted") and commit else ""
        if done["new_hash"] is None:
            what = f"retired {done['asset']} (was {short(done['old_hash'])})"
        else:
            was = f"{short(done['old_hash'])} -> " if done["old_hash"] else "new, "
            what = f"applied {done['asset']} ({was}{short(done['new_hash'])})"
        text.append(printable(f"{what} as {done['by']} ({done['assurance']}){commit}{edited}"))
        text.append("".join(f"\n  {printable(line)}" for line in done["changes"]))
        text.append("\n")
    return text


def spec_history(entries: list[dict]) -> Table:
    table = Table(title=escape(f"Specs of {entries[0]['asset']} put in force"), title_justify="left")
    for column in ("applied at", "by", "identity", "hash", "changes", "git commit"):
        table.add_column(column)
    for entry in entries:
        changes = "\n".join(entry["changes"][:10]) + (
            f"\n… {len(entry['changes']) - 10} more" if len(entry["changes"]) > 10 else ""
        )
        commit = f"{short(entry['git_commit'])} {entry['git_author']}" if entry["git_commit"] else "-"
        table.add_row(
            entry["applied_at"],
            escape(entry["applied_by"]),
            entry["assurance"],
            short(entry["spec_hash"]) or "retired",
            escape(changes),
            escape(commit),
        )
    return table


def spec_yaml(asset: str, spec_hash: str, body: dict) -> str:
    import yaml

    return f"# {asset}, spec {spec_hash}\n" + yaml.safe_dump(body, sort_keys=False, allow_unicode=True)


# What Markdown marks in a line: its lead (heading, quote, list item), links and images (their text
# stays), emphasis, strike-through and code spans. Underscores inside words are names, kept.
MARKDOWN_LEAD = re.compile(r"^\s*(?:#{1,6}\s+|>\s*|[-*+]\s+|\d+[.)]\s+)+")
MARKDOWN_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
MARKDOWN_SPANS = (
    re.compile(r"(\*\*|__|~~)(?=\S)(.+?)(?<=\S)\1"),
    re.compile(r"(\*)(?=\S)(.+?)(?<=\S)\*"),
    re.compile(r"(?<!\w)(_)(?=\S)(.+?)(?<=\S)_(?!\w)"),
    re.compile(r"(`+)(.+?)\1"),
)


def plain_first_line(markdown: str) -> str:
    """The first line of a description written in Markdown, as plain words."""
    line = next((line for line in markdown.splitlines() if line.strip()), "")
    line = MARKDOWN_LINK.sub(r"\1", MARKDOWN_LEAD.sub("", line))
    for span in MARKDOWN_SPANS:
        line = span.sub(r"\2", line)
    return line.strip()


def catalog_listing(entries: list[AssetEntry]) -> Group:
    """Each asset as a short block that wraps at any width: what it is, who holds it, its newest version."""
    blocks: list[Text] = [Text(f"Catalog: {len(entries):,} asset{'s' if len(entries) != 1 else ''}\n", style="bold")]
    for entry in entries:
        marks = [mark for mark, on in (("retired", entry.retired), ("critical version", entry.critical)) if on]
        facts = [
            entry.zone,
            entry.classification + (", pii" if entry.pii else ""),
            f"{entry.versions:,} version{'s' if entry.versions != 1 else ''}",
            *marks,
        ]
        block = Text.assemble((printable(entry.key), "bold"), "  ", (" · ".join(facts), "dim"), "\n")
        block.append(f"  {printable(plain_first_line(entry.description))}\n")
        block.append(
            f"  owner {printable(entry.owner)} · producer {printable(entry.producer)} · consumer {printable(entry.consumer)}\n"
        )
        block.append(f"  newest {_newest(entry)}\n")
        blocks.append(block)
    return Group(*blocks)


def _newest(entry: AssetEntry) -> str:
    newest = entry.newest
    if newest is None:
        return "version: none committed"
    label = f" label {printable(newest.label)}" if newest.label else ""
    return (
        f"@{newest.number}{label}: {newest.rows:,} rows, {newest.created_at.strftime('%Y-%m-%d %H:%M')}, "
        f"for {printable(newest.requested_by)}"
    )


def asset_detail(found: AssetDetail, width: int | None = None) -> Group:
    entry = found.entry
    facts = "".join(f"{name}: {value}\n" for name, value in found.facts().items())
    head = Text.assemble((printable(entry.key), "bold"), "\n", printable(f"{entry.description}\n{facts}", keep="\n"))
    columns = Table(title="Columns", title_justify="left")
    for heading in ("name", "type", "nullable", "description"):
        columns.add_column(heading)
    for column in found.columns:
        columns.add_row(
            escape(column["name"]),
            escape(column["type"]),
            "yes" if column.get("nullable", True) else "no",
            escape(column.get("description", "")),
        )
    if not found.spec.get("columns"):
        columns.title = "Columns (as the newest version was written; the spec declares none)"
    parts: list[RenderableType] = [head, columns] if found.columns else [head]
    parts.append(
        versions_table(entry.key, list(found.versions), width=width) if found.versions else Text("no version yet")
    )
    parts.append(Text(printable(spec_yaml(entry.key, entry.spec_hash, found.spec), keep="\n")))
    return Group(*parts)


def stdout_console() -> Console:
    """Standard output for people. Data is printed as it is: no emoji codes (`:x:`) are replaced;
    markup is only Custody's own, data in it is escaped."""
    return Console(highlight=False, soft_wrap=False, emoji=False)
