"""Definitions in force: an owner applies an edited spec before runs use it.

The catalog keeps, for each asset, the spec in force (`asset`), every spec it ever had by hash
(`spec_snapshot`) and each application with who made it and what it changed (`spec_application`).
With the policy setting `specs_approval` on, a run whose spec file differs from the one in force is
refused; off, runs take the files as they are and record a changed spec when they meet it.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlmodel import Session, col, select

from governance import ledger
from governance.access.directory import Directory
from governance.access.policy import Decision, Identity, Policy, Verb, coverage_problems, missing_groups
from governance.catalog import Catalog, utcnow
from governance.catalog.models import AssetRow, SpecApplication, SpecSnapshot
from governance.errors import DirectoryUnavailable, InvalidInput, NotFound, SpecError, error_summary
from governance.spec import RANK, AssetSpec, Classification, Spec, SpecSet, code_version
from governance.spec.diff import Change, changes
from governance.zones import AssetKey

# Shortest hash prefix `show` and `diff --from/--to` take.
MIN_PREFIX = 6
# Change lines a ledger entry keeps; the rest are counted.
LEDGER_LINES = 50


@dataclass(frozen=True)
class Implications:
    """What an edit does beyond its lines."""

    new_code_version: bool
    classification: tuple[str, str] | None = None  # before, after
    consumers_gain: tuple[str, ...] = ()
    consumers_lose: tuple[str, ...] = ()
    consumers_unknown: str | None = None  # why the directory could not say
    dependents: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        lines = (
            ["new code version: versions made from now on are stale against older ones"]
            if self.new_code_version
            else []
        )
        if self.classification:
            before, after = self.classification
            lines.append(
                f"classification {'lowered' if RANK[Classification(after)] < RANK[Classification(before)] else 'raised'}: {before} -> {after}"
            )
        if self.consumers_gain:
            lines.append(f"gain read access: {', '.join(self.consumers_gain)}")
        if self.consumers_lose:
            lines.append(f"lose read access: {', '.join(self.consumers_lose)}")
        if self.consumers_unknown:
            lines.append(f"who gains or loses read access is unknown: {self.consumers_unknown}")
        if self.dependents:
            lines.append(f"dependents affected: {', '.join(self.dependents)}")
        return lines


@dataclass(frozen=True)
class Edit:
    """One asset's spec file against its definition in force."""

    key: AssetKey
    file: str
    old_hash: str | None  # None: never applied
    new_hash: str | None  # None: the file is gone, the asset is retired
    changes: tuple[Change, ...]
    implications: Implications
    outline: str = ""  # of a new asset
    previous: Spec | None = field(default=None, compare=False, repr=False)  # the definition in force

    @property
    def is_new(self) -> bool:
        return self.old_hash is None

    @property
    def retires(self) -> bool:
        return self.new_hash is None

    def lines(self) -> list[str]:
        if self.retires:
            return ["- retired: its spec file is gone; its versions, lineage and ledger entries stay"]
        return [f"+ new asset: {self.outline}"] if self.is_new else [change.line() for change in self.changes]

    def as_dict(self) -> dict:
        return {
            "asset": str(self.key),
            "file": self.file,
            "new": self.is_new,
            "retired": self.retires,
            "old_hash": self.old_hash,
            "new_hash": self.new_hash,
            "changes": self.lines(),
            "implications": self.implications.lines(),
        }


@dataclass(frozen=True)
class Applied:
    key: AssetKey
    old_hash: str | None
    new_hash: str | None
    by: str
    assurance: str
    lines: tuple[str, ...]
    git: dict[str, str | bool] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Applied:
        """The application `as_dict` gave, as the service sends it."""
        fields = ("old_hash", "new_hash", "by", "assurance", "git")
        return cls(AssetKey.parse(data["asset"]), lines=tuple(data["changes"]), **{k: data[k] for k in fields})

    def as_dict(self) -> dict:
        return {
            "asset": str(self.key),
            "old_hash": self.old_hash,
            "new_hash": self.new_hash,
            "by": self.by,
            "assurance": self.assurance,
            "changes": list(self.lines),
            "git": self.git,
        }


@dataclass(frozen=True)
class HistoryEntry:
    asset: str
    spec_hash: str | None  # None: retired
    previous_hash: str | None
    applied_by: str
    assurance: str
    applied_at: str
    changes: list[str]
    git_commit: str | None
    git_author: str | None


def in_force(catalog: Catalog, keys: Iterable[AssetKey] | None = None) -> dict[AssetKey, AssetRow]:
    """The definitions in force, by asset: all of them, or those of `keys`."""
    with catalog.reading() as session:
        query = select(AssetRow)
        if keys is not None:
            query = query.where(col(AssetRow.key).in_([str(key) for key in keys]))
        return {AssetKey.parse(row.key): row for row in session.exec(query)}


def spec_in_force(row: AssetRow, file: Path) -> Spec:
    return Spec(AssetKey.parse(row.key), file, AssetSpec.model_validate_json(row.spec_json), row.spec_json)


def not_in_force(specs: Iterable[Spec], rows: dict[AssetKey, AssetRow]) -> dict[AssetKey, str | None]:
    """The specs whose file is not the definition in force, with the hash in force (None: none is)."""
    return {
        spec.key: rows[spec.key].spec_hash if spec.key in rows else None
        for spec in specs
        if spec.key not in rows or rows[spec.key].spec_hash != spec.hash
    }


def edits(catalog: Catalog, specs: SpecSet, directory: Directory | None, keys: Sequence[AssetKey] = ()) -> list[Edit]:
    """Each spec file that differs from its definition in force (of `keys`, when given), in dependency
    order, then each asset in force whose file is gone."""
    chosen = set(keys)
    rows = in_force(catalog, chosen or None)
    unknown = [key for key in keys if specs.get(key) is None and key not in rows]
    if unknown:
        raise NotFound(
            f"no spec file declares {', '.join(str(key) for key in unknown)} under {specs.root}, "
            "and no spec of it is in force"
        )
    candidates = [spec for spec in specs if not chosen or spec.key in chosen]
    pending = not_in_force(candidates, rows)
    retired = [
        Edit(
            key,
            "",
            row.spec_hash,
            None,
            (),
            Implications(False),
            previous=spec_in_force(row, specs.root / row.domain / f"{row.name}.yaml"),
        )
        for key, row in sorted(rows.items())
        if specs.get(key) is None
    ]
    return [_edit(spec, rows.get(spec.key), specs, directory) for spec in candidates if spec.key in pending] + retired


def _edit(spec: Spec, row: AssetRow | None, specs: SpecSet, directory: Directory | None) -> Edit:
    file = str(spec.file.relative_to(specs.root)) if spec.file.is_relative_to(specs.root) else str(spec.file)
    dependents = tuple(str(key) for key in downstream(specs, spec.key))
    if row is None:
        return Edit(spec.key, file, None, spec.hash, (), Implications(False, dependents=dependents), _outline(spec))
    old = spec_in_force(row, spec.file)
    found = changes(json.loads(old.as_json), json.loads(spec.as_json))
    return Edit(
        spec.key, file, row.spec_hash, spec.hash, found, _implications(old, spec, directory, dependents), previous=old
    )


def _outline(spec: Spec) -> str:
    body = spec.body
    columns = f", {len(body.columns)} columns" if body.columns else ""
    return f"{body.zone}, {body.classification}{columns}, owner {body.roles.owner}, consumer {body.roles.consumer}"


def _implications(old: Spec, new: Spec, directory: Directory | None, dependents: tuple[str, ...]) -> Implications:
    before, after = old.body.classification, new.body.classification
    classification = (before.value, after.value) if before != after else None
    gain: tuple[str, ...] = ()
    lose: tuple[str, ...] = ()
    unknown = None
    old_group, new_group = old.body.roles.consumer, new.body.roles.consumer
    if old_group != new_group:
        if directory is None:
            unknown = "no directory was asked"
        else:
            try:
                readers_before, readers_after = directory.members_of(old_group), directory.members_of(new_group)
                gain, lose = (
                    tuple(sorted(readers_after - readers_before)),
                    tuple(sorted(readers_before - readers_after)),
                )
            except DirectoryUnavailable as err:
                unknown = error_summary(err)
    return Implications(code_version(old) != code_version(new), classification, gain, lose, unknown, dependents)


def downstream(specs: SpecSet, key: AssetKey) -> list[AssetKey]:
    """Every asset that reads `key`, directly or through others, in dependency order."""
    reached = {key}
    found = []
    for spec in specs:
        if any(source in reached for source in spec.inputs):
            reached.add(spec.key)
            found.append(spec.key)
    return found


def apply(
    catalog: Catalog, policy: Policy, identity: Identity, specs: SpecSet, keys: Sequence[AssetKey] = ()
) -> list[Applied]:
    """Put the edited specs (of `keys`, when given) in force, all or none. Each needs the decision of
    `Policy.decide_apply`; one that lowers its classification or changes its consumers must also leave
    every reader of it allowed to read its inputs, and every reader of its dependents allowed to
    read it. The decisions are recorded up to the first denial, which raises AccessDenied. A spec
    whose role names a group the directory does not have is refused first (SpecError), nothing
    decided or changed."""
    from governance.access.guard import enforce_all

    found = edits(catalog, specs, policy.directory, keys)
    if not found:
        return []
    missing = missing_groups([specs[edit.key] for edit in found if not edit.retires], policy.directory)
    if missing:
        raise SpecError(missing)
    decisions = [(_decision(policy, identity, edit, specs), {"spec_hash": edit.new_hash}) for edit in found]
    enforce_all(catalog, decisions)
    _streams_in_step(
        catalog,
        policy,
        identity,
        [specs[edit.key] for edit in found if not edit.retires],
        [edit.key for edit in found if edit.retires],
    )
    git = git_of(specs.root, [specs[edit.key].file for edit in found if not edit.retires])
    applied = [_applied(edit, identity, {} if edit.retires else git.get(specs[edit.key].file, {})) for edit in found]
    with catalog.session() as session:
        for done in applied:
            if done.new_hash is None:
                _record_retired(session, done)
            else:
                _record(session, specs[done.key], done)
    return applied


def _streams_in_step(
    catalog: Catalog, policy: Policy, identity: Identity, applied: list[Spec], retired: list[AssetKey]
) -> None:
    """The topics of the specs put in force, with the ACLs their roles call for, before the specs
    are recorded: a cluster that refuses leaves the definitions in force as they were. A topic an
    asset no longer lands (retired, renamed, or no longer streamed) keeps no one's access."""
    from governance.access.guard import ledger_actor
    from governance.streams.broker import KafkaAdmin
    from governance.streams.settings import KafkaSettings
    from governance.streams.topics import admin_for, keep_in_step, let_go, stale_topics

    stale = stale_topics(catalog, {**{str(s.key): s.topic for s in applied}, **{str(key): None for key in retired}})
    admin = admin_for(applied) or (KafkaAdmin(KafkaSettings.from_env()) if stale else None)
    if admin is None:
        return
    recorded = {"actor": ledger_actor(identity.user), "assurance": identity.assurance, "because": "apply"}
    keep_in_step(catalog, admin, policy.directory, applied, **recorded)
    let_go(catalog, admin, stale, **recorded)


def _decision(policy: Policy, identity: Identity, edit: Edit, specs: SpecSet) -> Decision:
    if edit.retires:
        return policy.decide(identity, Verb.APPLY, edit.previous)
    spec = specs[edit.key]
    decision = policy.decide_apply(identity, edit.previous, spec)
    if not decision.allowed or not _widens(edit):
        return decision
    problems = _gate_problems(spec, specs, policy.directory)
    if not problems:
        return decision
    return Decision(identity, Verb.APPLY, str(spec.key), False, "; ".join(problems), directory=policy.source or None)


def _widens(edit: Edit) -> bool:
    lowered = (
        edit.implications.classification is not None
        and RANK[Classification(edit.implications.classification[1])]
        < RANK[Classification(edit.implications.classification[0])]
    )
    consumers = any(change.field == "roles.consumer" for change in edit.changes)
    return edit.is_new or lowered or consumers


def _gate_problems(spec: Spec, specs: SpecSet, directory: Directory) -> list[str]:
    """The classification gate: whoever may read `spec`, or an asset reading it, may read what it reads."""
    readers = [spec, *(specs[key] for key in specs.specs if spec.key in specs[key].inputs)]
    try:
        return [
            problem.message
            for reader in readers
            for problem in coverage_problems(reader, [specs[key] for key in reader.inputs], directory)
        ]
    except DirectoryUnavailable as err:
        return [error_summary(err)]


def _applied(edit: Edit, identity: Identity, git: dict[str, str | bool]) -> Applied:
    return Applied(
        edit.key, edit.old_hash, edit.new_hash, identity.user, identity.assurance.value, tuple(edit.lines()), git
    )


def _still_in_force(session: Session, done: Applied) -> None:
    """The definition in force is still the one the decision was about: another owner's application
    since then fails this one, all of it, before anything is written."""
    row = session.get(AssetRow, str(done.key))
    current = row.spec_hash if row else None
    if current != done.old_hash:
        now = f"{current[:12]}" if current else "none"
        raise InvalidInput(
            f"the definition in force of {done.key} changed while this was applied (now {now}): "
            "nothing was applied; run the command again"
        )


def _record(session: Session, spec: Spec, done: Applied) -> None:
    _still_in_force(session, done)
    key = str(spec.key)
    session.merge(
        AssetRow(
            key=key,
            domain=spec.key.domain,
            name=spec.key.name,
            zone=spec.body.zone,
            spec_hash=spec.hash,
            spec_json=spec.as_json,
            updated_at=utcnow(),
        )
    )
    known = session.exec(
        select(SpecSnapshot.id).where(SpecSnapshot.asset_key == key, SpecSnapshot.spec_hash == spec.hash)
    ).first()
    if known is None:
        session.add(SpecSnapshot(asset_key=key, spec_hash=spec.hash, spec_json=spec.as_json, recorded_at=utcnow()))
    session.add(
        SpecApplication(
            asset_key=key,
            spec_hash=spec.hash,
            previous_hash=done.old_hash,
            applied_by=done.by,
            assurance=done.assurance,
            applied_at=utcnow(),
            summary=json.dumps(list(done.lines)),
            git_commit=str(done.git["commit"]) if "commit" in done.git else None,
            git_author=str(done.git["author"]) if "author" in done.git else None,
        )
    )
    lines = list(done.lines[:LEDGER_LINES])
    if len(done.lines) > LEDGER_LINES:
        lines.append(f"… and {len(done.lines) - LEDGER_LINES} more")
    ledger.append(
        session,
        actor=done.by,
        action=ledger.Action.SPEC_APPLIED,
        asset=key,
        assurance=done.assurance,
        details={
            "spec_hash": spec.hash,
            "previous_hash": done.old_hash,
            "changes": lines,
            "file": spec.file.name,
            **({"git": done.git} if done.git else {}),
        },
    )


def _record_retired(session: Session, done: Applied) -> None:
    """The asset leaves the definitions in force; its versions, snapshots and history stay."""
    _still_in_force(session, done)
    key = str(done.key)
    row = session.get(AssetRow, key)
    if row is not None:
        session.delete(row)
    session.add(
        SpecApplication(
            asset_key=key,
            spec_hash=None,
            previous_hash=done.old_hash,
            applied_by=done.by,
            assurance=done.assurance,
            applied_at=utcnow(),
            summary=json.dumps(list(done.lines)),
        )
    )
    ledger.append(
        session,
        actor=done.by,
        action=ledger.Action.SPEC_RETIRED,
        asset=key,
        assurance=done.assurance,
        details={"previous_hash": done.old_hash},
    )


def git_of(root: Path, files: Sequence[Path]) -> dict[Path, dict[str, str | bool]]:
    """For each of `files` under the specs folder `root`, where it is a git checkout: the newest
    commit of the file and its author, with `uncommitted` when the file differs from it. Empty
    where git cannot tell: one question first, so a folder outside git costs one process, not one
    per file."""
    try:
        if _git(root, "rev-parse", "--is-inside-work-tree") != "true":
            return {}
        relative = [str(file.relative_to(root)) for file in files]
        edited = set(
            _git(root, "ls-files", "--modified", "--others", "--exclude-standard", "--", *relative).splitlines()
        )
        facts = {}
        for file, name in zip(files, relative, strict=True):
            log = _git(root, "log", "-1", "--format=%H%n%an <%ae>", "--", name)
            found: dict[str, str | bool] = dict(zip(("commit", "author"), log.splitlines(), strict=True)) if log else {}
            facts[file] = {**found, **({"uncommitted": True} if name in edited else {})}
        return facts
    except (OSError, ValueError, subprocess.CalledProcessError):
        return {}


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True, timeout=30)
    return done.stdout.strip()


def history(catalog: Catalog, key: AssetKey) -> list[HistoryEntry]:
    """Each application of the asset's spec, oldest first."""
    with catalog.session() as session:
        rows = session.exec(
            select(SpecApplication).where(SpecApplication.asset_key == str(key)).order_by(col(SpecApplication.id))
        ).all()
    if not rows:
        raise NotFound(f"no spec of {key} was ever applied")
    return [
        HistoryEntry(
            row.asset_key,
            row.spec_hash,
            row.previous_hash,
            row.applied_by,
            row.assurance,
            row.applied_at.isoformat(timespec="seconds"),
            json.loads(row.summary),
            row.git_commit,
            row.git_author,
        )
        for row in rows
    ]


def snapshot(catalog: Catalog, key: AssetKey, prefix: str) -> tuple[str, dict]:
    """The spec of `key` whose hash starts with `prefix`: its full hash and body."""
    if len(prefix) < MIN_PREFIX or any(c not in "0123456789abcdef" for c in prefix):
        raise InvalidInput(
            f"spec hash {prefix!r}: give at least {MIN_PREFIX} hex digits of it (custody specs history {key})"
        )
    with catalog.session() as session:
        rows = session.exec(
            select(SpecSnapshot).where(
                SpecSnapshot.asset_key == str(key), col(SpecSnapshot.spec_hash).startswith(prefix)
            )
        ).all()
    if not rows:
        raise NotFound(f"no spec of {key} has a hash starting {prefix} (custody specs history {key} lists them)")
    if len(rows) > 1:
        raise InvalidInput(f"{prefix} starts {len(rows)} spec hashes of {key}: give more digits")
    return rows[0].spec_hash, json.loads(rows[0].spec_json)


def compare(catalog: Catalog, key: AssetKey, old: str, new: str) -> tuple[str, str, tuple[Change, ...]]:
    """Two recorded specs of `key`, by hash prefix: their full hashes and the changes between them."""
    old_hash, before = snapshot(catalog, key, old)
    new_hash, after = snapshot(catalog, key, new)
    return old_hash, new_hash, changes(before, after)
