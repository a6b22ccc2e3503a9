"""Specs already validated, remembered by content hash: a code location with thousands of specs
reloads (Dagster loads it again for every run) without parsing YAML it has already checked.

The cache only ever saves work. A missing, unreadable or stale file means a full parse; an entry
is trusted only under the same fingerprint of the spec model that wrote it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

FORMAT = 1


def cache_file(cache_dir: Path, specs_root: Path) -> Path:
    """One file per specs folder, so folders sharing a home do not evict each other."""
    digest = hashlib.sha256(str(specs_root.resolve()).encode()).hexdigest()[:16]
    return cache_dir / f"specs-{digest}.json"


@dataclass
class SpecCache:
    """Canonical JSON of validated spec bodies, keyed by the sha256 of the file's bytes."""

    path: Path | None
    model: str
    entries: dict[str, str] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    changed: bool = False

    @classmethod
    def open(cls, path: Path | None, model: str) -> SpecCache:
        if path is None:
            return cls(None, model)
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return cls(path, model)
        if not isinstance(stored, dict) or stored.get("format") != FORMAT or stored.get("model") != model:
            return cls(path, model)
        entries = stored.get("specs")
        return cls(path, model, entries if isinstance(entries, dict) else {})

    def get(self, digest: str) -> str | None:
        found = self.entries.get(digest)
        if found is not None:
            self.used.add(digest)
        return found

    def put(self, digest: str, canonical: str) -> None:
        self.entries[digest] = canonical
        self.used.add(digest)
        self.changed = True

    def save(self, *, prune: bool = True) -> None:
        """Keep only what this load used (everything, without `prune`: a load of a few specs); write
        atomically. A home that cannot be written to (read-only deployments) only costs the next
        load its speed, so that error is not raised."""
        stale = set(self.entries) - self.used if prune else set()
        if self.path is None or not (self.changed or stale):
            return
        kept = {digest: self.entries[digest] for digest in sorted(self.used if prune else self.entries)}
        payload = json.dumps({"format": FORMAT, "model": self.model, "specs": kept}, separators=(",", ":"))
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".specs-", suffix=".tmp")
        except OSError:
            return
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(payload)
            os.replace(temporary, self.path)
        except OSError:
            Path(temporary).unlink(missing_ok=True)
