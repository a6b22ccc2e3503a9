"""The digest of a table's content, read from its Parquet files: a version's data_version.

It covers the schema (column names, types and nullability, nested fields included) and every value
of every row, in order. It does not depend on how the rows were split into files, row groups or
pages, nor on how they were written: compression, encodings, statistics, created_by, key-value
metadata, or whether a timestamp is stored as INT96 or INT64. Those can differ for the same rows:
parquet-mr lists a column chunk's encodings in the order of a Java hash set of enum constants,
which changes from one JVM to the next, so two runs of one job write files a few bytes apart.

Each column feeds three streams of canonical bytes: the positions of its nulls, the length of each
value (strings, binaries, lists and maps), and the values themselves. A column cut into chunks
anywhere feeds its streams the same bytes as the whole column would.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import TypeGuard

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from governance.errors import IntegrityError
from governance.pools import kept, settled
from governance.spark.types import arrow_type_name

SCHEME = "custody-content-1"
BATCH_ROWS = 1 << 16
WORKERS = min(8, os.cpu_count() or 1)


@dataclass
class _Column:
    """The running digests of one column; a struct, list or map column has its fields' as children."""

    type: pa.DataType
    int96: bool = False
    seen: int = 0
    null_count: int = 0
    nulls: hashlib._Hash = field(default_factory=hashlib.sha256)
    lengths: hashlib._Hash = field(default_factory=hashlib.sha256)
    values: hashlib._Hash = field(default_factory=hashlib.sha256)
    children: list[_Column] = field(default_factory=list)

    def digests(self) -> Iterator[bytes]:
        yield from (self.nulls.digest(), self.lengths.digest(), self.values.digest())
        for child in self.children:
            yield from child.digests()


@dataclass(frozen=True)
class Footer:
    """A Parquet file's footer as hashing read it, and the file's size: what a table snapshot needs
    of the file, without reading it again."""

    metadata: pq.FileMetaData
    size: int


@dataclass(frozen=True)
class ParquetContent:
    """What hashing a table's files found: per file its footer and size, row count and sha256 (of
    its bytes as they are), the digest of all their rows in order, and how many rows are null in
    each column."""

    footers: tuple[Footer, ...]
    rows: tuple[int, ...]
    sha256: tuple[str, ...]
    digest: str
    nulls: Mapping[str, int]

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(footer.size for footer in self.footers)


def digest_parquet(paths: Sequence[PurePath], filesystem: pafs.FileSystem | None = None) -> ParquetContent:
    """Hash the rows of Parquet files, taken in order as one table, and each file's bytes; local
    files are memory-mapped, those of another `filesystem` (an object store) read whole.

    One file is hashed at a time; an object store's next file is read meanwhile, so that the wait
    for its bytes overlaps the hashing. A column's streams depend on no other column, so within a
    file each column is read and hashed on a thread of its own, beside the hash of the file's
    bytes; decoding and hashing release the GIL."""
    if not paths:
        raise IntegrityError("no Parquet file to hash")
    schema, columns = None, []
    footers, rows, sums = [], [], []
    pool, prefetch = kept("digest", WORKERS), kept("digest-prefetch", 1)
    upcoming = prefetch.submit(_contents, paths[0], filesystem)
    try:
        for index, path in enumerate(paths):
            with upcoming.result() as mapped:
                if index + 1 < len(paths):
                    upcoming = prefetch.submit(_contents, paths[index + 1], filesystem)
                buffer = mapped.read_buffer()
                parquet = pq.ParquetFile(pa.BufferReader(buffer), coerce_int96_timestamp_unit="us")
                file_columns = _columns(parquet)
                described = [_describe(f, c) for f, c in zip(parquet.schema_arrow, file_columns)]
                if schema is None:
                    schema, columns = described, file_columns
                elif described != schema:
                    raise IntegrityError(f"{path.name} has another schema than the files before it")
                encoded = frozenset(_dictionary_encoded(parquet.metadata))
                hashing: list[Future] = []
                try:
                    hashing.append(pool.submit(_sha256, buffer))
                    hashing += [
                        pool.submit(_feed_file, column, field.name, leaves, buffer, parquet.metadata, encoded)
                        for column, field, leaves in zip(
                            columns, parquet.schema_arrow, _leaf_indices(parquet.schema_arrow)
                        )
                    ]
                    for done in hashing[1:]:
                        done.result()
                    sums.append(hashing[0].result())
                finally:
                    settled(hashing)
                footers.append(Footer(parquet.metadata, buffer.size))
                rows.append(parquet.metadata.num_rows)
    finally:
        settled([upcoming])
    digest = hashlib.sha256(f"{SCHEME}\n{json.dumps(schema)}\n{sum(rows)}\n".encode())
    for column in columns:
        for part in column.digests():
            digest.update(part)
    nulls = {described["name"]: column.null_count for described, column in zip(schema or [], columns)}
    return ParquetContent(tuple(footers), tuple(rows), tuple(sums), digest.hexdigest(), nulls)


def _contents(path: PurePath, filesystem: pafs.FileSystem | None) -> pa.NativeFile:
    """A local file memory-mapped; an object store's read whole into memory, here."""
    if filesystem is None or isinstance(filesystem, pafs.LocalFileSystem):
        return pa.memory_map(str(path))
    with filesystem.open_input_file(str(path)) as stream:
        return pa.BufferReader(stream.read_buffer())


def _leaf_indices(schema: pa.Schema) -> list[list[int]]:
    """Each top-level field's leaf columns in the file: found by position, not by name, since a
    column named `a.b` and a struct `a` with a field `b` share a dotted path."""
    indices, next_leaf = [], 0
    for arrow_field in schema:
        count = _leaf_count(arrow_field.type)
        indices.append(list(range(next_leaf, next_leaf + count)))
        next_leaf += count
    return indices


def _leaf_count(arrow_type: pa.DataType) -> int:
    if pa.types.is_map(arrow_type):
        return _leaf_count(arrow_type.key_type) + _leaf_count(arrow_type.item_type)
    if _is_list(arrow_type):
        return _leaf_count(arrow_type.value_type)
    if pa.types.is_struct(arrow_type):
        return sum(_leaf_count(f.type) for f in arrow_type)
    return 1


def _sha256(buffer: pa.Buffer) -> str:
    return hashlib.sha256(buffer).hexdigest()


def _feed_file(
    column: _Column, name: str, leaves: list[int], buffer: pa.Buffer, metadata: pq.FileMetaData, encoded: frozenset[str]
) -> None:
    """One column of one file into its digests; each thread opens the file anew, as a ParquetFile is
    not shared between threads."""
    reader = pq.ParquetFile(
        pa.BufferReader(buffer),
        metadata=metadata,
        read_dictionary=[name] if name in encoded else None,
        coerce_int96_timestamp_unit="us",
    )
    batches = reader.reader.iter_batches(
        BATCH_ROWS, list(range(metadata.num_row_groups)), column_indices=leaves, use_threads=False
    )
    for batch in batches:
        _feed(column, batch.column(0))


def _columns(parquet: pq.ParquetFile) -> list[_Column]:
    """The columns' digests. Arrow reads an INT96 timestamp (an instant, Spark's `timestamp`) like
    one without a time zone; the Parquet schema's leaves, in the same order, tell them apart."""
    int96 = iter([parquet.schema.column(i).physical_type == "INT96" for i in range(len(parquet.schema))])
    return [_column(f.type, int96) for f in parquet.schema_arrow]


def _column(arrow_type: pa.DataType, int96: Iterator[bool]) -> _Column:
    if pa.types.is_map(arrow_type):
        return _Column(arrow_type, children=[_column(arrow_type.key_type, int96), _column(arrow_type.item_type, int96)])
    if _is_list(arrow_type):
        return _Column(arrow_type, children=[_column(arrow_type.value_type, int96)])
    if pa.types.is_struct(arrow_type):
        return _Column(arrow_type, children=[_column(f.type, int96) for f in arrow_type])
    return _Column(arrow_type, int96=next(int96))


def _describe(arrow_field: pa.Field, column: _Column) -> dict:
    return {"name": arrow_field.name, "type": _type(column), "nullable": arrow_field.nullable}


def _type(column: _Column) -> str | dict:
    """The spec's name of a column's type (Spark's where the spec has none); nested types spelled out."""
    arrow_type = column.type
    if pa.types.is_map(arrow_type):
        key, value = (_type(child) for child in column.children)
        return {"map": {"key": key, "value": value, "value_nullable": arrow_type.item_field.nullable}}
    if _is_list(arrow_type):
        element = _type(column.children[0])
        return {"array": {"element": element, "element_nullable": arrow_type.value_field.nullable}}
    if pa.types.is_struct(arrow_type):
        return {"struct": [_describe(f, c) for f, c in zip(arrow_type, column.children)]}
    if pa.types.is_timestamp(arrow_type):
        return "timestamp" if arrow_type.tz is not None or column.int96 else "timestamp_ntz"
    return arrow_type_name(arrow_type)


def _dictionary_encoded(metadata: pq.FileMetaData) -> list[str]:
    """Top-level string and binary columns whose data pages all hold dictionary indices: Arrow reads
    those as dictionaries and expands them in less than half the time it takes to decode them."""
    names = []
    for index in range(metadata.num_columns):
        chunks = [metadata.row_group(group).column(index) for group in range(metadata.num_row_groups)]
        top_level_binary = chunks and chunks[0].physical_type == "BYTE_ARRAY" and "." not in chunks[0].path_in_schema
        # PLAIN next to a dictionary page means pages written after the dictionary grew too big.
        if top_level_binary and all(c.has_dictionary_page and "PLAIN" not in c.encodings for c in chunks):
            names.append(chunks[0].path_in_schema)
    return names


def _is_list(arrow_type: pa.DataType) -> TypeGuard[pa.ListType | pa.LargeListType]:
    return pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)


def _is_large_binary(arrow_type: pa.DataType) -> bool:
    return pa.types.is_large_string(arrow_type) or pa.types.is_large_binary(arrow_type)


def _is_binary(arrow_type: pa.DataType) -> bool:
    return _is_large_binary(arrow_type) or pa.types.is_string(arrow_type) or pa.types.is_binary(arrow_type)


def _feed(column: _Column, array: pa.Array) -> None:
    if isinstance(array, pa.DictionaryArray):
        array = array.dictionary_decode()
    column.null_count += array.null_count
    nulls = pc.is_null(array).to_numpy(zero_copy_only=False) if array.null_count else None
    if nulls is not None:
        _update(column.nulls, np.flatnonzero(nulls) + column.seen)
    column.seen += len(array)
    arrow_type = column.type
    if pa.types.is_map(arrow_type):
        entries = array.cast(_entries(arrow_type))
        assert isinstance(entries, pa.ListArray)  # cast to a list of structs
        _feed_lengths(column, entries)
        fields = entries.flatten()
        assert isinstance(fields, pa.StructArray)  # the entries, each a key and a value
        for child, values in zip(column.children, fields.flatten()):
            _feed(child, values)
    elif _is_list(arrow_type):
        assert isinstance(array, pa.ListArray | pa.LargeListArray)  # the array of a list type
        _feed_lengths(column, array)
        _feed(column.children[0], array.flatten())
    elif pa.types.is_struct(arrow_type):
        assert isinstance(array, pa.StructArray)  # the array of a struct type
        for child, values in zip(column.children, array.flatten()):
            _feed(child, values)
    elif _is_binary(arrow_type):
        _feed_binary(column, array, nulls)
    else:
        _update(column.values, _fixed_width(_canonical(array), nulls))


def _update(digest: hashlib._Hash, values: np.ndarray) -> None:
    # numpy's stubs give ndarray the buffer protocol (`__buffer__`) on Python 3.12 and later only.
    digest.update(values)  # type: ignore[arg-type]


def _entries(arrow_type: pa.MapType) -> pa.DataType:
    """A map as the list of its key-value entries."""
    return pa.list_(pa.field("entries", pa.struct([arrow_type.key_field, arrow_type.item_field]), nullable=False))


def _feed_lengths(column: _Column, array: pa.Array) -> None:
    """The length of each list, 0 for null; its `flatten` then gives the elements of all lists in order."""
    column.lengths.update(pc.fill_null(pc.list_value_length(array), 0).cast(pa.int64()).to_numpy())


def _feed_binary(column: _Column, array: pa.Array, nulls: np.ndarray | None) -> None:
    """The length of each value (0 for null), then the bytes of all values one after the other."""
    offsets = _offsets(array)
    lengths = np.diff(offsets).astype(np.int64)
    if nulls is not None and lengths[nulls].any():
        # Arrow lets a null slot point at bytes (a struct's nulls spread to its fields' slots, which
        # keep their values); only the values' bytes count. A slot read as null holds none.
        array = pc.if_else(pc.invert(pa.array(nulls)), array, pa.scalar(b"", array.type))
        offsets = _offsets(array)
        lengths = np.diff(offsets).astype(np.int64)
    _update(column.lengths, lengths)
    if len(array):
        column.values.update(_buffer(array, 2)[offsets[0] : offsets[-1]])


def _offsets(array: pa.Array) -> np.ndarray:
    """Where each value of a string or binary array starts, and where the last ends."""
    offsets = np.frombuffer(_buffer(array, 1), dtype=np.int64 if _is_large_binary(array.type) else np.int32)
    return offsets[array.offset : array.offset + len(array) + 1]


def _buffer(array: pa.Array, index: int) -> memoryview:
    """Buffer `index` of the array: its offsets or values, which every array of its type has (only
    the validity bitmap, buffer 0, may be absent)."""
    buffer = array.buffers()[index]
    if buffer is None:
        raise IntegrityError(f"cannot hash values of type {array.type}: they have no buffer {index}")
    return memoryview(buffer)


def _canonical(array: pa.Array) -> pa.Array:
    """Timestamps in microseconds and decimals in 16 bytes, as Spark holds them; booleans in a byte."""
    arrow_type = array.type
    if pa.types.is_timestamp(arrow_type) and arrow_type.unit != "us":
        return array.cast(pa.timestamp("us", arrow_type.tz))
    if pa.types.is_decimal(arrow_type) and arrow_type.byte_width < 16:
        return array.cast(pa.decimal128(arrow_type.precision, arrow_type.scale))
    if pa.types.is_boolean(arrow_type):
        return array.cast(pa.uint8())
    return array


def _fixed_width(array: pa.Array, nulls: np.ndarray | None) -> np.ndarray:
    """The values' bytes as Arrow holds them (little-endian), with zeros where Arrow may leave
    anything: under nulls."""
    try:
        width = array.type.byte_width
    except ValueError as err:
        raise IntegrityError(f"cannot hash values of type {array.type}") from err
    raw = np.frombuffer(_buffer(array, 1), dtype=np.uint8)[array.offset * width : (array.offset + len(array)) * width]
    if nulls is None:
        return raw
    values = raw.reshape(len(array), width).copy()
    values[nulls] = 0
    return values
