"""Apache Iceberg tables whose snapshots are Custody's versions, one table per asset.

A version's snapshot registers the version's own Parquet files (nothing is copied or rewritten),
described from the footers sealing read, and nothing else: it has no parent, so each snapshot holds
exactly that version's rows. It is tagged `custody-v<N>` in the same commit: a tag keeps its
snapshot through any engine's snapshot expiry. The table's current snapshot is the latest live
version. A purged version's snapshot is expired at once, and the one that empties the table when no
version is left once a new version replaces it, so the table's metadata grows with the live
versions only.

The tables' catalog is Iceberg's SQL catalog (the JDBC catalog of Iceberg's Java libraries, on the
same two tables) in Custody's own catalog database, named `custody`. Table metadata is kept under
the lake's `_tables` folder, outside the zones, so no engine's orphan-file cleanup of a table's
location can reach the versions' files.
"""

from __future__ import annotations

import random
import time
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import cached_property
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq
from sqlalchemy.engine import make_url

from governance.errors import InvalidName, TableSnapshotError, error_summary
from governance.lake import CATALOG_NAME
from governance.zones import AssetKey, version_number

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs as pafs
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyiceberg.table.snapshots import Snapshot

    from governance.content import Footer

TAG_PREFIX = "custody-v"
# The branch a version's snapshot is written on, inside the commit that tags it and drops the branch.
WRITING_PREFIX = "custody-writing-v"
# The snapshot summary's key that names the Custody version a snapshot holds.
VERSION_PROPERTY = "custody.version"
# Old metadata files are deleted as new ones are written: a table's history is the versions' tags.
TABLE_PROPERTIES = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "5",
    # The versions' files are Custody's: no engine's garbage collection of the table may delete them.
    "gc.enabled": "false",
    # A commit that loses to another is not replayed by PyIceberg, whose replay keeps the files it
    # meant to delete from the table it read: `align` reads the table again and starts over.
    "commit.retry.num-retries": "0",
}
INT96_HINT = (
    "a timestamp stored as Parquet INT96, which Iceberg does not read: Custody's Spark sessions write "
    "INT64 microseconds unless spark.sql.parquet.outputTimestampType says otherwise"
)
# Commits that lose to another process's are tried again, on the table as it then is, this often.
COMMIT_ATTEMPTS = 8
# A version's footers read at once, for its snapshot's statistics.
FOOTER_READERS = 8
# SQLite waits this long for a writer of the catalog database rather than failing at once.
SQLITE_BUSY_SECONDS = 30


def tag_of(number: int) -> str:
    return f"{TAG_PREFIX}{number}"


def number_of(tag: str) -> int | None:
    rest = tag.removeprefix(TAG_PREFIX)
    return version_number(rest) if rest != tag else None


@dataclass(frozen=True)
class LiveVersion:
    """A committed version as its table needs it: its files (absolute URIs), its summary, and the
    footers of those files already read, by URI (the others are read from the files)."""

    number: int
    files: tuple[str, ...]
    summary: Mapping[str, str]
    footers: Mapping[str, Footer] = field(default_factory=dict)
    # Iceberg's transform of a column, by name, that each of the files holds one value of.
    partitioned_by: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Alignment:
    """What aligning one table changed."""

    tagged: list[int] = field(default_factory=list)
    withdrawn: list[int] = field(default_factory=list)
    # Versions that could not be made snapshots, each with why: the others are aligned all the same.
    failed: dict[int, str] = field(default_factory=dict)
    # The guarding properties someone else had changed, as they found them (None: removed), put back.
    guarded: dict[str, str | None] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.tagged or self.withdrawn or self.guarded)


class IcebergTables:
    """The Iceberg tables of one lake, in the SQL catalog at `catalog_url`, metadata under
    `warehouse` (a `file://` or `s3://` URI), which `fs` reaches; `properties` tell PyIceberg how
    to reach an object store (credentials excepted: it reads those from the environment)."""

    def __init__(
        self,
        catalog_url: str,
        warehouse: str,
        fs: pafs.FileSystem | None = None,
        properties: Mapping[str, str] | None = None,
    ):
        import pyarrow.fs as pafs

        self.catalog_url = catalog_url
        self.warehouse = warehouse
        self.fs = fs or pafs.LocalFileSystem()
        self.properties = dict(properties or {})

    @cached_property
    def catalog(self) -> SqlCatalog:
        from pyiceberg.catalog.sql import SqlCatalog

        with _translated("open the Iceberg catalog in the catalog database"):
            return SqlCatalog(
                CATALOG_NAME, uri=_engine_url(self.catalog_url), warehouse=self.warehouse, **self.properties
            )

    def identifier(self, key: AssetKey) -> tuple[str, str]:
        return (key.domain, key.name)

    def table_name(self, key: AssetKey) -> str:
        """The table as an engine names it in the `custody` catalog."""
        return f"{CATALOG_NAME}.{key.domain}.{key.name}"

    def location(self, key: AssetKey) -> str:
        return f"{self.warehouse}/{key.domain}/{key.name}"

    def load(self, key: AssetKey) -> Table | None:
        """The asset's table, if it has one under this lake. A table whose metadata lies elsewhere
        came with a catalog database restored or copied from another home: it names the other
        home's files, so it is forgotten (its files are not touched) and made anew here; so is one
        whose metadata is gone (that home moved away, or its files deleted)."""
        from pyiceberg.exceptions import NoSuchTableError

        with _translated(f"read the Iceberg table of {key}"):
            try:
                table = self.catalog.load_table(self.identifier(key))
            except NoSuchTableError:
                return None
            except FileNotFoundError:
                table = None  # the catalog names metadata that is not there
            if table is not None and table.location() == self.location(key):
                return table
            self.catalog.drop_table(self.identifier(key))
            # Metadata a copy of the home brought along names the original's files: none of it is kept.
            with suppress(FileNotFoundError):
                self.fs.delete_dir(_path(self.location(key)))
            return None

    def peek(self, key: AssetKey) -> Table | None:
        """The asset's table as it is, changing nothing: None if it has none; a table `load` would
        remake (its metadata gone, or under another home's lake) is a TableSnapshotError."""
        from pyiceberg.exceptions import NoSuchTableError

        with _translated(f"read the Iceberg table of {key}"):
            try:
                table = self.catalog.load_table(self.identifier(key))
            except NoSuchTableError:
                return None
        if table.location() != self.location(key):
            raise TableSnapshotError(f"the Iceberg table of {key} lies outside this lake: custody repair makes it anew")
        return table

    def names(self) -> list[AssetKey]:
        """Every table of the catalog, as the asset it is of: one query of the SQL catalog's table,
        its rows taken as they are (PyIceberg's own listing builds an object of each, a query a
        namespace)."""
        from pyiceberg.catalog.sql import IcebergTables as Rows
        from sqlalchemy import select

        query = select(Rows.table_namespace, Rows.table_name).where(Rows.catalog_name == CATALOG_NAME)
        with _translated("list the Iceberg tables"), self.catalog.engine.connect() as connection:
            found = connection.execute(query).all()
        return [key for namespace, name in found if (key := _asset_of((*namespace.split("."), name))) is not None]

    def tags(self, key: AssetKey) -> dict[int, int]:
        """Version number -> snapshot id, for every `custody-v<N>` tag of the asset's table."""
        table = self.load(key)
        return _tags(table) if table is not None else {}

    def align(self, key: AssetKey, live: Collection[int], describe: Callable[[int], LiveVersion]) -> Alignment:
        """Make the asset's table show exactly the `live` versions: tag the untagged (`describe`
        gives a version's files and summary), withdraw the tags of versions no longer live, and
        make the latest the table's current snapshot. A commit another process got in first is
        taken from the table as it now is."""
        from pyiceberg.exceptions import CommitFailedException

        done = Alignment()
        with _translated(f"align the Iceberg table of {key} with its versions"):
            for attempt in range(1, COMMIT_ATTEMPTS + 1):
                try:
                    self._align(key, set(live), describe, done)
                    break
                except CommitFailedException:
                    if attempt == COMMIT_ATTEMPTS:
                        raise
                    # Another engine wrote the table (Custody's own writers take turns): let it finish.
                    time.sleep(random.uniform(0.05, 0.2) * attempt)
        return done

    def _align(self, key: AssetKey, wanted: set[int], describe: Callable[[int], LiveVersion], done: Alignment) -> None:
        table = self.load(key)
        if table is None:
            if not wanted:
                return
            table = self._create(key, describe(max(wanted)))
        unguarded = {
            name: table.properties.get(name)
            for name in TABLE_PROPERTIES
            if table.properties.get(name) != TABLE_PROPERTIES[name]
        }
        if unguarded:
            # Another engine's writer (`ALTER TABLE … SET TBLPROPERTIES ('gc.enabled'='true')`) would
            # let its garbage collection, or a DROP … PURGE, delete the versions' files.
            restored: dict[str, str] = {name: TABLE_PROPERTIES[name] for name in unguarded}
            table.transaction().set_properties(restored).commit_transaction()
            done.guarded.update(unguarded)
        for number in sorted(set(_tags(table)) - wanted):
            table.manage_snapshots().remove_tag(tag_of(number)).commit()
            done.withdrawn.append(number)
        for number in sorted(wanted - set(_tags(table))):
            try:
                with _translated(f"make the table snapshot of {key}@{number}", conflicts=False):
                    _snapshot(table, describe(number), self.fs, current=number == max(wanted))
            except TableSnapshotError as err:
                done.failed[number] = str(err)
                continue
            done.failed.pop(number, None)
            done.tagged.append(number)
        tagged = wanted & set(_tags(table))
        _settle(table, max(tagged) if tagged else None)

    def _create(self, key: AssetKey, first: LiveVersion) -> Table:
        """The asset's table, made with the first version's schema; or the one another process made
        at the same moment."""
        from pyiceberg.exceptions import NamespaceAlreadyExistsError, TableAlreadyExistsError
        from sqlalchemy.exc import IntegrityError

        namespace = (key.domain,)
        try:
            self.catalog.create_namespace(namespace)
        except (NamespaceAlreadyExistsError, IntegrityError):
            if not self.catalog.namespace_exists(namespace):
                raise
        try:
            return self.catalog.create_table(
                self.identifier(key),
                schema=_file_schema(first, self.fs),
                location=self.location(key),
                properties=TABLE_PROPERTIES,
            )
        except (TableAlreadyExistsError, IntegrityError):
            if not self.catalog.table_exists(self.identifier(key)):
                raise
            return self.catalog.load_table(self.identifier(key))


def _asset_of(identifier: tuple[str, ...]) -> AssetKey | None:
    """The asset a table is of; None for one that no asset's name makes (another engine's, through
    the operators' catalog)."""
    if len(identifier) != 2:
        return None
    try:
        return AssetKey(*identifier)
    except InvalidName:
        return None


def _tags(table: Table) -> dict[int, int]:
    found = {}
    for name, ref in table.refs().items():
        number = number_of(name)
        if number is not None and ref.snapshot_ref_type == "tag":
            found[number] = ref.snapshot_id
    return found


def _snapshot(table: Table, version: LiveVersion, fs: pafs.FileSystem, *, current: bool) -> None:
    """One snapshot holding exactly the version's files, with the table's schema made the
    version's, and its tag, in one commit; made the table's current snapshot if `current`. A
    snapshot an older release left untagged (it tagged in a second commit, which a crash could
    prevent) is tagged rather than made again.

    The snapshot has no parent: it is written apart from the table's other snapshots, so that it
    lists the version's files alone, and making it reads no earlier version's manifests.
    """
    from pyiceberg.table.refs import MAIN_BRANCH
    from pyiceberg.table.update.snapshot import ManageSnapshots

    found = _snapshot_holding(table, version)
    if found is not None:
        table.manage_snapshots().create_tag(found, tag_of(version.number)).commit()
        return
    schema = _file_schema(version, fs)
    with table.transaction() as transaction:
        head = table.current_snapshot()
        if head is not None:
            # Changes nothing, but requires the main branch to be where this table found it: a
            # transaction keeps only its first requirement of a kind, and the branch the snapshot is
            # written on, always new, would give that one. A commit from a table another process
            # has moved since fails, and `align` starts over from the table as it now is.
            ManageSnapshots(transaction).set_current_snapshot(snapshot_id=head.snapshot_id)
        _match_partitions(transaction, version.partitioned_by, schema)
        _name_columns(transaction)
        before = {snapshot.snapshot_id for snapshot in transaction.table_metadata.snapshots}
        # Written on a branch of its own, which starts empty, then dropped: Iceberg writes a table's
        # first snapshot on the main branch only, where there is nothing before it either.
        branch = f"{WRITING_PREFIX}{version.number}" if before else MAIN_BRANCH
        summary = dict(version.summary)
        with transaction.update_snapshot(snapshot_properties=summary, branch=branch).fast_append() as append:
            for data_file in _data_files(table, transaction.table_metadata, version):
                append.append_data_file(data_file)
        (made,) = [s.snapshot_id for s in transaction.table_metadata.snapshots if s.snapshot_id not in before]
        manage = ManageSnapshots(transaction).create_tag(made, tag_of(version.number))
        if branch != MAIN_BRANCH:
            manage.remove_branch(branch)
        if current:
            manage.set_current_snapshot(snapshot_id=made)
        manage.commit()


def _match_partitions(transaction, wanted: Mapping[str, str], schema: pa.Schema) -> None:
    """The table's schema made the version's, and its partitioning the one its files hold: fields
    no longer wanted go first, since a column a partition is of cannot be dropped."""
    from pyiceberg.transforms import parse_transform

    fields = {f"{column}_{transform}": (transform, column) for transform, column in wanted.items()}
    metadata = transaction.table_metadata
    present = {field.name for field in metadata.spec().fields}
    if present - fields.keys():
        with transaction.update_spec() as update:
            for name in present - fields.keys():
                update.remove_field(name)
    _match_schema(transaction, schema)
    if fields.keys() - present:
        with transaction.update_spec() as update:
            for name in fields.keys() - present:
                transform, column = fields[name]
                update.add_field(column, parse_transform(transform), name)


def _name_columns(transaction) -> None:
    """Readers find the columns of Spark's files, which carry no Iceberg field ids, by name."""
    from pyiceberg.table import TableProperties

    metadata = transaction.table_metadata
    if metadata.name_mapping() is None:
        mapping = metadata.schema().name_mapping.model_dump_json()
        transaction.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING: mapping})


def _data_files(table: Table, metadata: TableMetadata, version: LiveVersion) -> list[DataFile]:
    """The version's Parquet files as the table's data files, with their statistics: from the
    footers already read, or else read from the files (at once, as an object store's reads are
    mostly waiting)."""
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    unread = [path for path in version.files if path not in version.footers]
    read: dict[str, DataFile] = {}
    if unread:
        with ThreadPoolExecutor(max_workers=FOOTER_READERS) as pool:
            described = pool.map(lambda path: parquet_file_to_data_file(table.io, metadata, path), unread)
            read = dict(zip(unread, described))
    return [read[path] if path in read else _data_file(metadata, path, version.footers[path]) for path in version.files]


def _data_file(metadata: TableMetadata, path: str, footer: Footer) -> DataFile:
    """A data file of the table described from its footer, as PyIceberg describes one it reads.
    PyIceberg would also check the file's schema against the table's: here the table's schema was
    just made the version's, whose files sealing found to share one schema."""
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    schema = metadata.schema()
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=footer.metadata,
        stats_columns=compute_statistics_plan(schema, metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=statistics.partition(metadata.spec(), schema),
        file_size_in_bytes=footer.size,
        spec_id=metadata.default_spec_id,
        **statistics.to_serialized_dict(),
    )


def _snapshot_holding(table: Table, version: LiveVersion) -> int | None:
    """A snapshot made for the version (a crash may have left it untagged) that holds exactly its files."""
    wanted = set(version.files)
    for snapshot in table.snapshots():
        if _holds_version(snapshot) == str(version.number) and _files_of(table, snapshot) == wanted:
            return snapshot.snapshot_id
    return None


def _files_of(table: Table, snapshot: Snapshot) -> set[str]:
    return {
        entry.data_file.file_path
        for manifest in snapshot.manifests(table.io)
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
    }


def _empty(table: Table, transaction) -> None:
    """Remove the table's rows in `transaction`, if it has any."""
    from pyiceberg.expressions import AlwaysTrue

    if table.current_snapshot() is not None:
        with warnings.catch_warnings():
            # An empty version before this one leaves nothing to delete, which is no news.
            warnings.filterwarnings("ignore", "Delete operation did not match any records")
            transaction.delete(AlwaysTrue())


def _holds_version(snapshot: Snapshot) -> str | None:
    """The Custody version number a snapshot's summary names, if any."""
    return snapshot.summary.additional_properties.get(VERSION_PROPERTY) if snapshot.summary else None


def _match_schema(transaction, schema: pa.Schema) -> None:
    """The table's columns become the version's: added, widened, dropped and ordered as its files have them."""
    current = transaction.table_metadata.schema()
    names = [f.name for f in schema]
    with transaction.update_schema() as update:
        update.union_by_name(schema)
        for gone in [f.name for f in current.fields if f.name not in names]:
            update.delete_column(gone)
        for before, after in pairwise(names):
            update.move_after(after, before)
        if names:
            update.move_first(names[0])


def _settle(table: Table, latest: int | None) -> None:
    """The latest live version as the current snapshot, and every snapshot no tag holds expired."""
    tags = _tags(table)
    head = table.current_snapshot()
    if latest is None:
        if head is not None and head.snapshot_id not in tags.values() and _holds_version(head):
            with table.transaction() as transaction:
                _empty(table, transaction)
    elif head is None or head.snapshot_id != tags[latest]:
        table.manage_snapshots().set_current_snapshot(snapshot_id=tags[latest]).commit()
    held = {ref.snapshot_id for ref in table.refs().values()}
    loose = [s.snapshot_id for s in table.snapshots() if s.snapshot_id not in held]
    if loose:
        table.maintenance.expire_snapshots().by_ids(loose).commit()


def _file_schema(version: LiveVersion, fs: pafs.FileSystem) -> pa.Schema:
    """The Arrow schema of a version's first file, without Spark's metadata."""
    if not version.files:
        raise TableSnapshotError("a version with no Parquet file cannot be a table snapshot")
    first = version.files[0]
    if first in version.footers:
        return version.footers[first].metadata.schema.to_arrow_schema().remove_metadata()
    return pq.read_schema(_path(first), filesystem=fs).remove_metadata()


def _path(uri: str) -> str:
    """A file's URI as its file system names it."""
    return uri.split("://", 1)[-1]


def _engine_url(catalog_url: str) -> str:
    """The catalog database's URL as PyIceberg's engine takes it: SQLite waits on a busy database."""
    url = make_url(catalog_url)
    if url.get_backend_name() == "sqlite" and "timeout" not in url.query:
        url = url.update_query_dict({"timeout": str(SQLITE_BUSY_SECONDS)})
    return url.render_as_string(hide_password=False)


@contextmanager
def _translated(doing: str, *, conflicts: bool = True) -> Iterator[None]:
    """PyIceberg's, Arrow's and the database's errors as one TableSnapshotError saying what failed;
    with `conflicts` False, a commit that lost to another is left for the caller to retry."""
    from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, ValidationError
    from pyiceberg.io.pyarrow import UnsupportedPyArrowTypeException
    from sqlalchemy.exc import SQLAlchemyError

    try:
        yield
    except TableSnapshotError:
        raise
    except CommitFailedException as err:
        if not conflicts:
            raise
        raise TableSnapshotError(f"cannot {doing}: {error_summary(err)}") from err
    except UnsupportedPyArrowTypeException as err:
        hint = f" ({INT96_HINT})" if "timestamp[ns]" in str(err) else ""
        raise TableSnapshotError(f"cannot {doing}: {error_summary(err)}{hint}") from err
    except (
        NoSuchTableError,
        ValidationError,
        SQLAlchemyError,
        OSError,
        ValueError,
        TypeError,
    ) as err:
        raise TableSnapshotError(f"cannot {doing}: {error_summary(err)}") from err


def spark_conf(
    catalog_url: str, warehouse: str, jars: Sequence[Path], lake: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The settings a Spark session needs to read the tables as the `custody` catalog: Iceberg's
    runtime and the database's JDBC driver in `jars`, and Iceberg's JDBC catalog on the catalog
    database; `lake`, the Spark settings that reach an object store the lake is in. The database's password
    is not among them: pass it as `spark.sql.catalog.custody.jdbc.password` from the session's own
    secrets."""
    prefix = f"spark.sql.catalog.{CATALOG_NAME}"
    url = make_url(catalog_url)
    conf = {
        "spark.jars": ",".join(str(jar) for jar in jars),
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "jdbc",
        f"{prefix}.uri": jdbc_url(catalog_url),
        f"{prefix}.warehouse": warehouse,
        # Each statement loads the table as it is now: a table cached for Spark's default 30 s would
        # still show a purged version, or the guarding properties someone had changed before repair.
        f"{prefix}.cache-enabled": "false",
        **(lake or {}),
    }
    if url.username:
        conf[f"{prefix}.jdbc.user"] = url.username
    return conf


def jdbc_url(catalog_url: str) -> str:
    """The catalog database's JDBC URL, without credentials."""
    url = make_url(catalog_url)
    backend = url.get_backend_name()
    if backend == "sqlite" and url.database:
        return f"jdbc:sqlite:{Path(url.database).absolute()}"
    if backend == "postgresql":
        port = f":{url.port}" if url.port else ""
        return f"jdbc:postgresql://{url.host or 'localhost'}{port}/{url.database or ''}"
    raise TableSnapshotError(
        f"CUSTODY_CATALOG_URL: Iceberg's JDBC catalog has no driver here for a {backend} database; "
        "use SQLite or PostgreSQL for the catalog"
    )
