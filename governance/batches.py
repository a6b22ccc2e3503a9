"""DropZone batches: a folder per batch, `_READY` when complete, `_batch.yaml` for who and why."""

from __future__ import annotations

import codecs
import errno
import grp
import hashlib
import os
import re
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, BinaryIO

import numpy as np
import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from governance.access.directory import NAME as USER_NAME
from governance.errors import BatchError, InvalidName, NotFound, UnsafePath, UnsafeYaml, shown
from governance.runs import user_name
from governance.versions import BatchRecord, FileEntry
from governance.yamlsource import safe_load, yaml_problem
from governance.zones import CHUNK, AssetKey, Lake, check_batch_id

READY_MARKER = "_READY"
BATCH_META = "_batch.yaml"
SNIFF_BYTES = 8192
UTF8_BOM = b"\xef\xbb\xbf"
LF, CR, TAB = ord("\n"), ord("\r"), ord("\t")
MAX_CONTROLS_SHOWN = 5
# `\u0000` to `\u001f` in JSON text, but tab, LF and CR, and not after an escaped backslash.
ESCAPED_CONTROL = re.compile(rb"(?<!\\)(?:\\\\)*\\u00(0[0-8bBcCeEfF]|1[0-9a-fA-F])")
ESCAPE_BYTES = 7
FIRST_LINE_BYTES = 1 << 20
MAX_META_BYTES = 64 * 1024
MAX_LABEL = 128
MAX_NOTE = 4096
# How a producer's files are written here: writable by their owner alone, whatever the umask.
PRODUCED_FILE, PRODUCED_FOLDER = 0o644, 0o755
WRITTEN_BY_THE_OWNER_ALONE = "a batch's files must be writable by their owner alone, so who wrote them is known"
# How much later than its `_READY` a batch's folder may be stamped by the creation of `_READY` itself
# (see `_sealed`): measured, a few milliseconds on a busy machine.
MARKING_NS = 1_000_000_000


def _user_name(value: str) -> str:
    if not USER_NAME.fullmatch(value):
        raise ValueError("not a directory user name: letters, digits, '.', '_' or '-', at most 64")
    return value


class BatchMeta(BaseModel):
    """What a producer says of a batch; each field is bounded, since it is stored in the catalog."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requested_by: Annotated[str, AfterValidator(_user_name)] | None = None
    label: Annotated[str, Field(max_length=MAX_LABEL)] | None = None
    note: Annotated[str, Field(max_length=MAX_NOTE)] | None = None


@dataclass(frozen=True)
class DropFile:
    """A data file of a batch, and what identifies it on disk when it was checked."""

    path: Path
    bytes: int
    # Device, inode, size, mtime and ctime in ns: the change time also moves when a file is
    # rewritten with its modification time set back, or given another owner or mode.
    identity: tuple[int, int, int, int, int]


@dataclass(frozen=True)
class Batch:
    """A batch folder whose files passed the checks that need only their first and last bytes."""

    key: AssetKey
    batch_id: str
    path: Path
    files: tuple[DropFile, ...]
    meta: BatchMeta
    format: str
    # The OS user whose batch it is (`ReadyMark`).
    owner: str
    # A feed's downloads: one hour's answers, each named by when it was fetched.
    downloads: bool = False

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)


@dataclass(frozen=True)
class ControlChar:
    """A control character of a text file and its line, from 1."""

    file: str
    line: int
    code: int

    def to_dict(self) -> dict[str, object]:
        return {"file": self.file, "line": self.line, "character": f"U+{self.code:04X}"}


@dataclass(frozen=True)
class FileScan:
    """What one pass over a file's bytes tells: its hash and, for text, its lines, encoding and the
    first control characters it holds."""

    sha256: str
    valid_utf8: bool = True
    lines: int | None = None
    controls: tuple[ControlChar, ...] = ()


@dataclass(frozen=True)
class BatchScan:
    """Every file of a batch read once, in the batch's order."""

    batch: Batch
    files: tuple[FileScan, ...]

    @property
    def fingerprint(self) -> str:
        """Identity of the content: the sorted file hashes, whatever the file names. A feed's hour
        is part of it, as the same answers in another hour are that hour's data; so are the names
        of a raw feed's downloads, which say when each was fetched and land as rows."""
        batch = self.batch
        if batch.downloads and batch.format == "raw":
            entries = [f"{drop.path.name}\t{scan.sha256}" for drop, scan in zip(batch.files, self.files)]
        else:
            entries = [scan.sha256 for scan in self.files]
        hour = [f"hour\t{batch.meta.label or ''}"] if batch.downloads else []
        return hashlib.sha256("\n".join([*hour, *sorted(entries)]).encode()).hexdigest()

    @property
    def valid_utf8(self) -> bool:
        return all(f.valid_utf8 for f in self.files)

    @property
    def controls(self) -> tuple[ControlChar, ...]:
        """The first control characters of each file (other than tab, CR and LF)."""
        return tuple(c for f in self.files for c in f.controls)

    @property
    def lines(self) -> int | None:
        """Lines in the text files: no reader finds more records than that."""
        counts = [f.lines for f in self.files if f.lines is not None]
        return sum(counts) if len(counts) == len(self.files) else None

    def record(self) -> BatchRecord:
        batch = self.batch
        return BatchRecord(
            batch_id=batch.batch_id,
            fingerprint=self.fingerprint,
            files=tuple(FileEntry(str(f.path), f.bytes, scan.sha256) for f, scan in zip(batch.files, self.files)),
            requested_by=batch.meta.requested_by,
            label=batch.meta.label,
            note=batch.meta.note,
        )


def ready_batches(lake: Lake, key: AssetKey) -> list[str]:
    """Ids of the batches marked ready, oldest marker first."""
    drop = lake.drop_dir(key)
    if not drop.is_dir():
        return []
    ready = [p for p in drop.iterdir() if p.is_dir() and (p / READY_MARKER).is_file()]
    ready.sort(key=lambda p: ((p / READY_MARKER).stat().st_mtime_ns, p.name))
    return [p.name for p in ready]


def open_batch(lake: Lake, key: AssetKey, batch_id: str, fmt: str, *, downloads: bool = False) -> Batch:
    """Check a batch folder and the first and last bytes of its files, then that the batch is its
    folder's owner's (`ReadyMark`); raise BatchError naming the first problem. `scan_batch` reads
    them whole. In a feed's `downloads`, a text file that does not start as its format does is left
    for the reader to quarantine: a feed's hour holds whatever the feed answered, and one bad answer
    must not keep the others from landing."""
    try:
        folder = lake.batch_dir(key, batch_id)
    except (InvalidName, UnsafePath) as err:
        raise BatchError(f"batch {batch_id!r} of {key}: {err}") from err
    if not folder.is_dir():
        raise NotFound(f"no batch {batch_id!r} for {key} in the DropZone ({folder})")
    if not (folder / READY_MARKER).is_file():
        raise BatchError(
            f"batch {batch_id!r} of {key} is not marked ready: create {folder / READY_MARKER} once every file is in place"
        )
    meta = _read_meta(folder)
    checked = [_check_file(lake.drop_dir(key), entry, fmt, sniff=not downloads) for entry in _data_entries(folder)]
    if not checked:
        raise BatchError(f"batch {batch_id!r} of {key} is empty: {folder} holds no data file")
    mark = _sealed(folder, [(file.path, status) for file, status in checked])
    files = tuple(file for file, _ in checked)
    return Batch(key, batch_id, folder, files, meta, fmt, user_name(mark.owner), downloads)


def _data_entries(folder: Path) -> list[Path]:
    """The batch's data files, as ingestion lists them: every name but those starting with '_' or '.'."""
    return [entry for entry in sorted(folder.iterdir()) if not entry.name.startswith(("_", "."))]


@dataclass(frozen=True)
class ReadyMark:
    """Whose a batch is and when it was marked ready: the OS user owning its folder, and the change
    time of its `_READY`. Unlike a modification time, no unprivileged user can set a change time
    back: a file that changed after the batch was marked ready shows it."""

    folder: Path
    owner: int
    marked: int

    def refuse_unsealed(self, path: Path, status: os.stat_result) -> None:
        """Refuse a file of the batch that anyone but the folder's owner owns or may write (they
        could have written it), or that changed after the batch was marked ready."""
        self.refuse_foreign(path, status)
        self.refuse_shared(path, status)
        self.refuse_changed(path, status.st_ctime_ns)

    def refuse_foreign(self, path: Path, status: os.stat_result) -> None:
        if status.st_uid != self.owner:
            raise BatchError(
                f"{path} is owned by {user_name(status.st_uid)}, not by {user_name(self.owner)} "
                "who owns the batch's folder"
            )

    def refuse_shared(self, path: Path, status: os.stat_result) -> None:
        """A POSIX ACL that lets anyone else write shows in the group bits, which hold its mask."""
        if status.st_mode & stat.S_IWGRP:
            raise BatchError(
                f"{path} is writable by its group ({_group_name(status.st_gid)}): {WRITTEN_BY_THE_OWNER_ALONE}"
            )
        if status.st_mode & stat.S_IWOTH:
            raise BatchError(f"{path} is writable by others: {WRITTEN_BY_THE_OWNER_ALONE}")

    def refuse_changed(self, path: Path, changed: int) -> None:
        if changed > self.marked:
            raise BatchError(
                f"{path} changed after the batch was marked ready: touch {self.folder / READY_MARKER} "
                "again once the batch is complete"
            )


def _sealed(folder: Path, files: Iterable[tuple[Path, os.stat_result]]) -> ReadyMark:
    """The batch's mark, once its folder, `_READY`, `_batch.yaml` (if any) and its data `files`, as
    they were found (through any symlink, which must keep to the mark itself), keep to it.

    A folder changes when a name in it is added, removed or renamed, and creating `_READY` is such
    a change: the kernel may stamp the folder with a finer clock than the new file, or a moment
    later, whenever anything looked at the folder meanwhile (as the sensor does). A folder changed
    within `MARKING_NS` of its mark is taken as changed by it."""
    ready = folder / READY_MARKER
    try:
        status, marked = os.lstat(folder), os.lstat(ready)
    except FileNotFoundError as err:
        raise NotFound(f"{err.filename} is gone from the DropZone") from err
    if not stat.S_ISDIR(status.st_mode):
        raise BatchError(f"{folder}: a batch is a folder, not a link to one")
    if not stat.S_ISREG(marked.st_mode):
        raise BatchError(f"{ready}: not a regular file")
    mark = ReadyMark(folder, status.st_uid, marked.st_ctime_ns)
    mark.refuse_shared(folder, status)
    mark.refuse_changed(folder, status.st_ctime_ns - MARKING_NS)  # later than that, not by the mark
    mark.refuse_unsealed(ready, marked)
    meta = folder / BATCH_META
    if os.path.lexists(meta):
        mark.refuse_unsealed(meta, _status(meta))
    for path, found in files:
        link = _status(path, follow=False)
        if stat.S_ISLNK(link.st_mode):  # a link's mode means nothing; who made it, and when, does
            mark.refuse_foreign(path, link)
            mark.refuse_changed(path, link.st_ctime_ns)
        mark.refuse_unsealed(path, found)
    return mark


def _status(path: Path, *, follow: bool = True) -> os.stat_result:
    """The status of the file `path` names, through a symlink unless not to `follow`."""
    try:
        return os.stat(path, follow_symlinks=follow)
    except OSError as err:
        raise BatchError(f"{path}: cannot read: {err.strerror or err}") from err


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:  # a group id without a group entry, as in some containers
        return f"gid {gid}"


def batch_stamp(lake: Lake, key: AssetKey, batch_id: str) -> str:
    """Changes whenever the batch's `_READY` or `_batch.yaml` does: a producer's fix shows in it,
    however soon it follows."""
    try:
        folder = lake.batch_dir(key, batch_id)
        ready = (folder / READY_MARKER).stat().st_mtime_ns
        return f"{ready}.{_meta_digest(folder / BATCH_META)}"
    except (InvalidName, UnsafePath) as err:
        raise BatchError(f"batch {batch_id!r} of {key}: {err}") from err
    except FileNotFoundError as err:
        raise NotFound(f"batch {batch_id!r} of {key} is gone from the DropZone") from err


def _meta_digest(path: Path) -> str:
    """A digest of what the file holds; of its name's status when it is no regular file (the refusal
    names that), without blocking on a FIFO or following a link."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return "none"
    except OSError:
        status = os.lstat(path)
        return f"{status.st_mtime_ns}.{status.st_size}"
    with os.fdopen(descriptor, "rb") as handle:
        status = os.fstat(handle.fileno())
        if not stat.S_ISREG(status.st_mode):
            return f"{status.st_mtime_ns}.{status.st_size}"
        return hashlib.sha256(handle.read(MAX_META_BYTES + 1)).hexdigest()[:16]


def batch_owner(lake: Lake, key: AssetKey, batch_id: str) -> str:
    """The OS user whose batch it is: the owner of its folder (whoever made it, since only root can
    give a folder to someone else), when its `_READY`, `_batch.yaml` and data files are theirs too,
    none is writable by anyone else, and none changed after the batch was marked ready
    (`ReadyMark`); BatchError naming the first that breaks this."""
    try:
        folder = lake.batch_dir(key, batch_id)
        files = [(entry, _status(entry)) for entry in _data_entries(folder)]
    except (InvalidName, UnsafePath) as err:
        raise BatchError(f"batch {batch_id!r} of {key}: {err}") from err
    except FileNotFoundError as err:
        raise NotFound(f"batch {batch_id!r} of {key} is gone from the DropZone") from err
    return user_name(_sealed(folder, files).owner)


def batch_meta(lake: Lake, key: AssetKey, batch_id: str) -> BatchMeta:
    """What a batch's `_batch.yaml` says; BatchError when it cannot be read or breaks its rules."""
    try:
        folder = lake.batch_dir(key, batch_id)
    except (InvalidName, UnsafePath) as err:
        raise BatchError(f"batch {batch_id!r} of {key}: {err}") from err
    return _read_meta(folder)


def scan_batch(batch: Batch) -> BatchScan:
    """Read every byte of the batch once; raise BatchError naming a file that cannot be read or
    that changed since the batch was opened, or, for its folder, `_READY` and `_batch.yaml`, since
    it was marked ready: a change after the batch was decided is caught as it is read."""
    _sealed(batch.path, ())
    return BatchScan(batch, tuple(_scan_file(f, batch.format) for f in batch.files))


def _read_meta(folder: Path) -> BatchMeta:
    """The batch's `_batch.yaml`, read like a data file (one regular file with one name, not a
    symlink: its content lands in the catalog), its size checked before it is parsed."""
    path = folder / BATCH_META
    if not os.path.lexists(path):
        return BatchMeta()
    try:
        with _open_checked(path, follow=False) as (handle, status):
            raw = handle.read(MAX_META_BYTES + 1)
    except OSError as err:
        raise BatchError(f"{path}: cannot read batch metadata: {err.strerror or err}") from err
    if len(raw) > MAX_META_BYTES:
        raise BatchError(
            f"{path}: {max(status.st_size, len(raw)):,} bytes, more than the {MAX_META_BYTES:,} bytes "
            f"({MAX_META_BYTES // 1024} KB) a {BATCH_META} may hold"
        )
    try:
        return BatchMeta.model_validate(safe_load(raw.decode("utf-8")) or {})
    except UnsafeYaml as err:
        raise BatchError(f"{path}: {err}") from err
    except UnicodeDecodeError as err:
        raise BatchError(f"{path}: cannot read batch metadata: {err}") from err
    except yaml.YAMLError as err:
        raise BatchError(f"{path}: not valid YAML: {yaml_problem(err)}") from err
    except ValidationError as err:
        raise BatchError(f"{path}: {_meta_problem(err)}") from err


def _meta_problem(err: ValidationError) -> str:
    first = err.errors(include_url=False)[0]
    if not first["loc"]:
        return "expected a mapping of requested_by, label and note"
    field = shown(".".join(str(p) for p in first["loc"]), 40)
    if first["type"] == "extra_forbidden":
        return f"{field}: unknown key; allowed keys: requested_by, label, note"
    return f"{field}: {first['msg'].removeprefix('Value error, ')}"


def _check_file(drop: Path, entry: Path, fmt: str, sniff: bool = True) -> tuple[DropFile, os.stat_result]:
    """A data file may be a symlink within its asset's DropZone folder; it must be one regular file
    with one name. Returns it, and the status of the file it is.

    A hard link is refused whatever it points at: its other name may be any file the service can
    read, outside the DropZone, and nothing in the batch says which. The file is checked through
    the handle its first bytes are read from, and where that handle leads is checked again, so a
    link swapped in meanwhile is refused too.
    """
    if ":" in entry.name or not entry.name.isprintable():
        raise BatchError(
            f"{entry.parent / shown(entry.name)}: a file name may not hold ':' or an unprintable "
            "character, which Spark cannot read in a path; rename the file"
        )
    if entry.resolve().is_dir():
        raise BatchError(f"{entry}: a batch is a flat folder of files; sub-folders are not ingested")
    try:
        with _open_checked(entry, follow=True, within=drop) as (handle, status):
            _sniff(entry, handle.read(SNIFF_BYTES), fmt if sniff else "")
            if fmt == "parquet":
                handle.seek(max(0, status.st_size - 4))
                if status.st_size < 12 or handle.read(4) != b"PAR1":
                    raise BatchError(f"{entry}: not a Parquet file (no PAR1 footer)")
    except OSError as err:
        raise BatchError(f"{entry}: cannot read: {err.strerror or err}") from err
    return DropFile(entry, status.st_size, _identity(status)), status


@contextmanager
def _open_checked(path: Path, *, follow: bool, within: Path | None = None) -> Iterator[tuple[BinaryIO, os.stat_result]]:
    """`path` opened for reading once it is known to be one regular file with one name, and, when
    `within` is given, one that lies inside that folder. Non-blocking, so that a FIFO is refused
    instead of waited on; without `follow`, a symlink is refused."""
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW)
    try:
        descriptor = os.open(path, flags)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise BatchError(f"{path}: a symlink is refused here") from err
        raise
    with os.fdopen(descriptor, "rb") as handle:
        status = os.fstat(descriptor)
        if within is not None:
            real = _opened_path(descriptor, path)
            if real != within.resolve() and not real.is_relative_to(within.resolve()):
                raise BatchError(
                    f"{path}: a symlink that points outside the DropZone folder {within} ({real}) is refused"
                )
        if not stat.S_ISREG(status.st_mode):
            raise BatchError(f"{path}: not a regular file")
        if status.st_nlink > 1:
            raise BatchError(
                f"{path}: a hard link ({status.st_nlink} names for one file) is refused; "
                "copy the file into the batch instead"
            )
        yield handle, status


def _opened_path(descriptor: int, path: Path) -> Path:
    """Where an open file really is: what the kernel says of the descriptor, not what the path
    resolves to now (which may have been swapped since)."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{descriptor}"))
    except OSError:  # no /proc: the path's resolution is all there is
        return path.resolve()


@contextmanager
def opened(file: DropFile) -> Iterator[BinaryIO]:
    """A batch file opened again for reading, once it is known to be the very file that was checked."""
    try:
        with os.fdopen(os.open(file.path, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
            _refuse_changed(file, os.fstat(handle.fileno()))
            yield handle
    except OSError as err:
        raise BatchError(f"{file.path}: cannot read: {err.strerror or err}") from err


def _identity(status: os.stat_result) -> tuple[int, int, int, int, int]:
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns


def check_unchanged(batch: Batch) -> None:
    """Raise BatchError if a file of the batch was replaced, relinked or written since it was checked."""
    for f in batch.files:
        try:
            status = os.stat(f.path)
        except OSError as err:
            raise BatchError(f"{f.path}: cannot read: {err.strerror or err}") from err
        _refuse_changed(f, status)


def _refuse_changed(file: DropFile, status: os.stat_result) -> None:
    if _identity(status) == file.identity and status.st_nlink == 1:
        return
    how = f"{file.bytes} bytes, then {status.st_size}" if status.st_size != file.bytes else "replaced or rewritten"
    raise BatchError(f"{file.path}: changed while being ingested ({how}); a batch must not change once marked ready")


def _scan_file(file: DropFile, fmt: str) -> FileScan:
    digest, text = hashlib.sha256(), TextScan(file.path.name, escapes=fmt == "json") if fmt in ("csv", "json") else None
    size = 0
    with opened(file) as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
            size += len(block)
            if text:
                text.feed(block)
    if size != file.bytes:
        raise BatchError(
            f"{file.path}: changed while being ingested ({file.bytes} bytes, then {size}); "
            "a batch must not change once marked ready"
        )
    if text:
        return FileScan(digest.hexdigest(), text.valid_utf8, text.lines, text.controls)
    return FileScan(digest.hexdigest())


class TextScan:
    """What ingestion needs to know of a text file, learnt in the hashing pass: whether it is valid
    UTF-8, how many lines it holds, ended by LF, CR or CRLF as Spark's line reader splits them, and
    the lines of its first control characters (any below U+0020 but tab, LF and CR), as bytes, or,
    with `escapes` (JSON), also as `\\u0000`-style escapes, which a parser turns into the same."""

    def __init__(self, name: str = "", *, escapes: bool = False) -> None:
        self.name = name
        self.escapes = escapes
        self._utf8 = Utf8Check()
        self._line_ends = 0
        self._last = b""
        self._tail = b""  # where an escape cut by the block's end begins
        self.controls: tuple[ControlChar, ...] = ()

    def feed(self, block: bytes) -> None:
        self._utf8.feed(block)
        view = np.frombuffer(block, np.uint8)
        before = self._line_ends
        feeds = int(np.count_nonzero(view == LF))
        returns = int(np.count_nonzero(view == CR)) if b"\r" in block else 0
        self._line_ends += _line_ends(view, self._last, feeds, returns)
        tabs = block.count(b"\t") if b"\t" in block else 0
        if len(self.controls) < MAX_CONTROLS_SHOWN and int(np.count_nonzero(view < 32)) > feeds + returns + tabs:
            positions = np.flatnonzero((view < 32) & (view != LF) & (view != CR) & (view != TAB))
            self._note(view, before, [(int(p), int(view[p])) for p in positions[:MAX_CONTROLS_SHOWN]])
        if self.escapes and len(self.controls) < MAX_CONTROLS_SHOWN and b"\\u00" in self._tail + block:
            matches = ESCAPED_CONTROL.finditer(self._tail + block)
            self._note(view, before, [(max(0, m.start() - len(self._tail)), int(m.group(1), 16)) for m in matches])
        self._last = block[-1:]
        self._tail = block[-ESCAPE_BYTES:]

    def _note(self, view: np.ndarray, line_ends_before: int, found: list[tuple[int, int]]) -> None:
        """Add the control characters at `(position, code)` in this block, in order, up to the limit."""
        controls = list(self.controls)
        for position, code in found[: MAX_CONTROLS_SHOWN - len(controls)]:
            head = view[:position]
            ends = _line_ends(head, self._last, int(np.count_nonzero(head == LF)), int(np.count_nonzero(head == CR)))
            controls.append(ControlChar(self.name, line_ends_before + ends + 1, code))
        self.controls = tuple(controls)

    @property
    def valid_utf8(self) -> bool:
        return self._utf8.valid

    @property
    def lines(self) -> int:
        unterminated = self._last not in (b"", b"\n", b"\r")
        return self._line_ends + unterminated


def _line_ends(view: np.ndarray, last: bytes, feeds: int, returns: int) -> int:
    """Line ends in `view`, which follows a block ending in `last`: LF, CR, and CRLF counted once."""
    ends = feeds
    if returns:
        cr = view == CR
        ends += returns - int(np.count_nonzero(cr[:-1] & (view[1:] == LF)))
    if last == b"\r" and len(view) and view[0] == LF:
        ends -= 1  # a CRLF split across two blocks
    return ends


class Utf8Check:
    """Streaming UTF-8 validation that only pays for blocks holding non-ASCII bytes."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._pending = False
        self._valid = True

    def feed(self, block: bytes) -> None:
        if not self._valid or (block.isascii() and not self._pending):
            return
        try:
            self._decoder.decode(block)
        except UnicodeDecodeError:
            self._valid = False
        else:
            self._pending = bool(self._decoder.getstate()[0])

    @property
    def valid(self) -> bool:
        if self._valid and self._pending:
            try:
                self._decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                self._valid = False
            self._pending = False
        return self._valid


def _sniff(path: Path, head: bytes, fmt: str) -> None:
    if not head:
        raise BatchError(f"{path}: the file is empty")
    if fmt == "parquet":
        if not head.startswith(b"PAR1"):
            raise BatchError(f"{path}: not a Parquet file (no PAR1 header)")
        return
    if fmt == "json":
        text = head.removeprefix(UTF8_BOM).lstrip()
        if text and text[:1] not in (b"{", b"["):
            raise BatchError(
                f"{path}: not JSON: expected JSON objects, one per line, and the file starts with neither '{{' nor '['"
            )
        if not text:
            raise BatchError(f"{path}: holds only whitespace")


def first_line(file: DropFile, limit: int = FIRST_LINE_BYTES) -> tuple[str, bool]:
    """The first line of a text file, BOM removed, read from at most `limit` bytes; and whether it
    is whole (not cut at the limit)."""
    with opened(file) as handle:
        raw = handle.readline(limit)
    whole = len(raw) < limit or raw.endswith(b"\n")
    return raw.removeprefix(UTF8_BOM).decode("utf-8", errors="replace").rstrip("\r\n"), whole


def drop_batch(
    lake: Lake, key: AssetKey, batch_id: str, files: dict[str, bytes], meta: BatchMeta | None = None
) -> Path:
    """Write a batch into the DropZone and mark it ready, as a producer would."""
    folder = lake.drop_dir(key) / check_batch_id(batch_id)
    folder.mkdir(PRODUCED_FOLDER, parents=True, exist_ok=False)
    for name, content in files.items():
        write_produced(folder / name, content)
    if meta is not None:
        data = {k: v for k, v in meta.model_dump().items() if v is not None}
        write_produced(folder / BATCH_META, yaml.safe_dump(data).encode())
    mark_ready(folder)
    return folder


def write_produced(path: Path, content: bytes) -> None:
    """A file of a batch written, writable by its owner alone whatever the process's umask."""
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRODUCED_FILE), "wb") as handle:
        handle.write(content)


def mark_ready(folder: Path) -> None:
    """Mark a complete batch ready, last: what changes in it after this refuses it."""
    (folder / READY_MARKER).touch(PRODUCED_FILE)
