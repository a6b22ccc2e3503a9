"""The catalog's answers as pandas DataFrames with typed columns, shown in Jupyter as readable tables:
times in ISO form, long hashes cut short (the whole value is in the frame, and in the cell's tooltip)."""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pandas as pd

from governance.access.views import AccessView
from governance.catalog.entries import AssetEntry
from governance.catalog.listing import AssetDetail
from governance.catalog.models import LedgerEntry, VersionRow

HASHES = frozenset(
    {"data_version", "code_version", "spec_hash", "run_id", "run", "sha256", "hash", "prev_hash", "attempt_id"}
)
SHOWN = 12


class Frame(pd.DataFrame):
    """A DataFrame that Jupyter shows with ISO times and shortened hashes."""

    @property
    def _constructor(self):
        return Frame

    def _repr_html_(self) -> str:
        # As pandas does, a long frame shows its first and last rows (display.max_rows): styling
        # every row of a whole ledger would put megabytes into the notebook.
        limit = pd.get_option("display.max_rows") or len(self)
        half = max(limit // 2, 1)
        shown = self if len(self) <= limit else pd.DataFrame(pd.concat([self.head(half), self.tail(half)]))
        styler = _styled(shown)
        if len(shown) < len(self):
            styler = styler.set_caption(f"{len(self):,} rows: the first and last {half:,} shown")
        return styler.hide(axis="index")._repr_html_()


def _styled(frame: pd.DataFrame):
    """ISO times, and hashes cut short with the whole value as the cell's tooltip."""
    hashes: list[Hashable] = [name for name in frame.columns if name in HASHES]
    times: list[Hashable] = [name for name in frame.columns if _is_time(frame[name])]
    styler = frame.style.format(na_rep="")
    if times:
        styler = styler.format(_iso, subset=times, na_rep="")
    if hashes:
        styler = styler.format(_short, subset=hashes, na_rep="")
        tips = pd.DataFrame("", index=frame.index, columns=frame.columns)
        for name in hashes:
            tips[name] = frame[name].astype("string").fillna("")
        styler = styler.set_tooltips(tips)
    return styler


def _is_time(column: pd.Series) -> bool:
    return pd.api.types.is_datetime64_any_dtype(column)


def _iso(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime | pd.Timestamp) else "" if value is None else str(value)


def _short(value: Any) -> str:
    text = "" if value is None or value is pd.NA else str(value)
    return text if len(text) <= SHOWN else text[:SHOWN] + "…"


def typed(
    records: Iterable[Mapping[str, Any]],
    times: Iterable[str] = (),
    columns: list[str] | None = None,
    dtypes: Mapping[str, str] | None = None,
) -> Frame:
    """Records as a Frame: pandas' nullable dtypes (string, Int64, boolean), `times` as UTC datetimes.
    `dtypes` fixes the columns whose type must not depend on the rows, empty or all missing."""
    frame = pd.DataFrame.from_records(list(records), columns=columns).convert_dtypes()
    if dtypes:
        frame = frame.astype(dict(dtypes))
    for name in times:
        frame[name] = pd.to_datetime(frame[name], utc=True, format="ISO8601")
    return Frame(frame)


def _kinds(strings: str = "", ints: str = "", flags: str = "") -> dict[str, str]:
    return {
        **dict.fromkeys(strings.split(), "string"),
        **dict.fromkeys(ints.split(), "Int64"),
        **dict.fromkeys(flags.split(), "boolean"),
    }


CATALOG_COLUMNS = [
    "key",
    "domain",
    "zone",
    "description",
    "owner",
    "producer",
    "consumer",
    "classification",
    "pii",
    "newest",
    "newest_label",
    "rows",
    "created_at",
    "requested_by",
    "versions",
    "purged",
    "critical",
    "retired",
    "spec_hash",
    "tags",
    "columns",
]


CATALOG_TYPES = _kinds(
    "key domain zone description owner producer consumer classification newest_label requested_by spec_hash",
    "newest rows versions purged",
    "pii critical retired",
)


def catalog_frame(entries: list[AssetEntry]) -> Frame:
    """One row per asset, as `custody catalog --json` gives it, its newest committed version spread
    over `newest`, `newest_label`, `rows`, `created_at` and `requested_by`."""
    return typed(
        (_flat(entry.to_dict()) for entry in entries),
        times=["created_at"],
        columns=CATALOG_COLUMNS,
        dtypes=CATALOG_TYPES,
    )


def _flat(record: dict[str, Any]) -> dict[str, Any]:
    newest = record.pop("newest") or {}
    return {
        **record,
        "newest": newest.get("number"),
        "newest_label": newest.get("label"),
        "rows": newest.get("rows"),
        "created_at": newest.get("created_at"),
        "requested_by": newest.get("requested_by"),
    }


VERSION_COLUMNS = [
    "asset_key",
    "number",
    "label",
    "status",
    "criticality",
    "zone",
    "rows",
    "rows_quarantined",
    "bytes",
    "created_at",
    "requested_by",
    "assurance",
    "run_id",
    "code_version",
    "spec_hash",
    "data_version",
    "label_from",
    "purged_at",
    "path",
]


VERSION_TYPES = _kinds(
    "asset_key label status criticality zone requested_by assurance run_id code_version spec_hash "
    "data_version label_from path",
    "number rows rows_quarantined bytes",
)


def versions_frame(rows: Iterable[VersionRow]) -> Frame:
    records = [{name: _when(getattr(row, name)) for name in VERSION_COLUMNS} for row in rows]
    return typed(records, times=["created_at", "purged_at"], columns=VERSION_COLUMNS, dtypes=VERSION_TYPES)


LEDGER_COLUMNS = [
    "seq",
    "ts",
    "actor",
    "action",
    "result",
    "asset_key",
    "version",
    "run_id",
    "assurance",
    "reason",
    "details",
]


LEDGER_TYPES = _kinds("actor action result asset_key run_id assurance reason", "seq version")


def ledger_frame(entries: Iterable[LedgerEntry]) -> Frame:
    """One row per entry; a decision's result and reason get columns of their own, the rest stays in `details`."""
    records = []
    for entry in entries:
        details = json.loads(entry.details)
        records.append(
            {
                "seq": entry.seq,
                "ts": entry.ts,
                "actor": entry.actor,
                "action": entry.action,
                "result": details.get("result"),
                "asset_key": entry.asset_key,
                "version": entry.version,
                "run_id": entry.run_id,
                "assurance": entry.assurance,
                "reason": details.get("reason"),
                "details": details,
            }
        )
    return typed(records, times=["ts"], columns=LEDGER_COLUMNS, dtypes=LEDGER_TYPES)


READER_COLUMNS = ["version", "user", "how", "channel", "engine", "at", "seq"]


def readers_frame(readers: Iterable[Mapping[str, Any]]) -> Frame:
    """One row per read of a version (governance.lineage.readers), oldest first."""
    return typed(
        [dict(reader) for reader in readers],
        times=["at"],
        columns=READER_COLUMNS,
        dtypes=_kinds("version user how channel engine", "seq"),
    )


def access_frame(view: AccessView) -> Frame:
    """One row per role: its group, the members the directory gives it, and what it may do."""
    return typed(
        [
            {
                "asset": view.asset,
                "role": role.role,
                "group": role.group,
                "members": list(role.members),
                "may": list(role.may),
            }
            for role in view.roles
        ],
        columns=["asset", "role", "group", "members", "may"],
    )


def _when(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


@dataclass(frozen=True)
class AssetCard:
    """One asset whole, as Jupyter shows it: what it is, its columns and its versions."""

    detail: AssetDetail

    @property
    def columns(self) -> Frame:
        return typed(self.detail.columns, columns=["name", "type", "nullable", "description"])

    @property
    def versions(self) -> Frame:
        return versions_frame(self.detail.versions)

    def to_dict(self) -> dict[str, Any]:
        return self.detail.to_dict()

    def _repr_html_(self) -> str:
        from html import escape

        entry = self.detail.entry
        rows = "".join(
            f"<tr><th style='text-align:left'>{escape(k)}</th><td style='text-align:left'>{escape(v)}</td></tr>"
            for k, v in self.detail.facts().items()
        )
        return (
            f"<h4>{escape(entry.key)}</h4><p>{escape(entry.description)}</p><table>{rows}</table>"
            f"<h5>Columns</h5>{self.columns._repr_html_()}<h5>Versions</h5>{self.versions._repr_html_()}"
        )
