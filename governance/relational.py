"""A PostgreSQL table or query read through Spark's JDBC reader, as of one snapshot of the database.

Consistency: every part of a read sees the database as it was at one moment. That covers the
partitions Spark reads in parallel, the count of rows read, the quarantine pass, the high-water mark
and the partition bounds. The driver opens a REPEATABLE READ, READ ONLY transaction and exports its
snapshot (`pg_export_snapshot`). Each of Spark's connections imports that snapshot before it reads.
The transaction stays open until the version is committed. Rows committed after that moment wait
for the next version.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime

from py4j.java_gateway import JavaClass, JavaObject
from py4j.protocol import Py4JError, Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from governance.errors import (
    EnvironmentProblem,
    InvalidInput,
    NotFound,
    SourceRefused,
    SourceUnavailable,
    shown,
)
from governance.readers import Parsed, TextChecks, column_difference, first_reason, value_checks
from governance.sources import Place
from governance.spark.types import spark_type
from governance.spec import JdbcSource, Spec

DRIVER = "org.postgresql.Driver"
# What PostgreSQL prints for a number, a date or a time: nothing else is ever put into SQL.
MARK = re.compile(r"-?[0-9][0-9 :.+\-T]*")
# The types whose order is their values' order, as PostgreSQL names them.
MARKABLE = frozenset({"int2", "int4", "int8", "date", "timestamp", "timestamptz"})
SNAPSHOT_ID = re.compile(r"[0-9A-F]+-[0-9A-F]+(-[0-9]+)?")
# SQLSTATE class 08 is a connection exception: worth another try later.
UNREACHABLE = "08"
DATABASE_ERROR = re.compile(r"org\.postgresql\.util\.PSQLException: (.+)")
TEMPORAL = (T.DateType, T.TimestampType, T.TimestampNTZType)
MAX_REASON = 200


@dataclass(frozen=True)
class Credentials:
    user: str
    password: str = field(repr=False)


def credentials(spec: Spec, environ: Mapping[str, str]) -> Credentials:
    """The user and password from the environment variables the spec names."""
    source = spec.database_source
    missing = [name for name in (source.user_env, source.password_env) if not environ.get(name)]
    if missing:
        raise InvalidInput(
            f"{spec.file}: {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set: "
            f"the database's user and password for {spec.key} come from the environment"
        )
    return Credentials(environ[source.user_env], environ[source.password_env])


@dataclass(frozen=True)
class Snapshot:
    """An open transaction whose view of the database every read of one version shares."""

    connection: JavaObject
    snapshot_id: str
    taken_at: datetime

    def row(self, sql: str) -> tuple[str | None, ...]:
        return _row(self.connection, sql)

    def type_of(self, column: str, relation: str) -> str:
        """The database's name for the type of `column` of `relation` (int8, timestamptz, text…)."""
        statement = self.connection.createStatement()
        try:
            return str(
                statement.executeQuery(f"SELECT {column} FROM {relation} WHERE false")
                .getMetaData()
                .getColumnTypeName(1)
            )
        finally:
            statement.close()


def _row(connection, sql: str) -> tuple[str | None, ...]:
    """The first row of a query's answer, each value as text."""
    statement = connection.createStatement()
    try:
        result = statement.executeQuery(sql)
        if not result.next():
            return ()
        return tuple(result.getString(i) for i in range(1, result.getMetaData().getColumnCount() + 1))
    finally:
        statement.close()


@contextmanager
def snapshot(spark: SparkSession, place: Place, login: Credentials, where: str) -> Iterator[Snapshot]:
    """A snapshot of the database, held until the block ends."""
    with talking_to(place, login):
        connection = _connect(spark, place, login, where)
    try:
        with talking_to(place, login):
            connection.setAutoCommit(False)
            statement = connection.createStatement()
            statement.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            statement.execute("SET LOCAL TIME ZONE 'UTC'")
            # This connection waits, idle in its transaction, while Spark reads: a server's idle
            # timeout would end it, and the snapshot with it.
            statement.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
            statement.close()
            snapshot_id, at = _row(
                connection, "SELECT pg_export_snapshot(), to_char(now(), 'YYYY-MM-DD\"T\"HH24:MI:SS.US')"
            )
        if not snapshot_id or not at or not SNAPSHOT_ID.fullmatch(snapshot_id):
            raise SourceRefused(f"{where}: {place.url} did not export a snapshot to read in")
        yield Snapshot(connection, snapshot_id, datetime.fromisoformat(at).replace(tzinfo=UTC))
    finally:
        # The transaction only read: ending it cannot lose anything, and a connection already gone
        # must not hide what happened inside the block.
        with suppress(Py4JError):
            connection.rollback()
        with suppress(Py4JError):
            connection.close()


def _connect(spark: SparkSession, place: Place, login: Credentials, where: str):
    # The JVM's own driver, the one Spark's reader uses: one URL syntax, one TLS configuration.
    jvm = spark._jvm
    if jvm is None:
        raise EnvironmentProblem(f"{where}: reading a database needs a Spark session with a JVM, not Spark Connect")
    driver = jvm.org.postgresql.Driver
    if not isinstance(driver, JavaClass):
        raise EnvironmentProblem(
            f"{where}: the PostgreSQL JDBC driver is not on Spark's class path; install libpostgresql-jdbc-java "
            "or set CUSTODY_JDBC_DRIVER to the driver's jar, then start Custody again"
        )
    properties = jvm.java.util.Properties()
    properties.setProperty("user", login.user)
    properties.setProperty("password", login.password)
    properties.setProperty("ApplicationName", "custody")
    connection = driver().connect(place.url, properties)
    if connection is None:
        raise SourceRefused(f"{where}: the PostgreSQL driver does not take the URL {place.url}")
    return connection


@contextmanager
def talking_to(place: Place, login: Credentials) -> Iterator[None]:
    """Turn what the database refused, whether the driver or one of Spark's tasks met it, into one
    line that names the source and the user; the password never appears in it."""
    try:
        yield
    except (Py4JJavaError, PySparkException) as err:
        found = _database_error(err)
        if found is None:
            raise
        state, message = found
        message = shown(message.replace(login.password, "***") if login.password else message, MAX_REASON)
        text = f"{place.name} at {place.url}, as user {login.user!r}: {message}"
        if state.startswith(UNREACHABLE):
            raise SourceUnavailable(text) from err
        raise SourceRefused(text) from err


def _database_error(err: Exception) -> tuple[str, str] | None:
    """The SQLSTATE and first line of the database's error behind a failure, if one is."""
    if isinstance(err, Py4JJavaError):
        throwable, depth = err.java_exception, 0
        while throwable is not None and depth < 20:
            if throwable.getClass().getName() == "org.postgresql.util.PSQLException":
                return str(throwable.getSQLState() or ""), str(throwable.getMessage() or "").strip().splitlines()[0]
            throwable, depth = throwable.getCause(), depth + 1
    # A task's failure reaches the driver as text.
    found = DATABASE_ERROR.search(str(err))
    return ("", found.group(1).strip()) if found else None


@dataclass(frozen=True)
class ReadPlan:
    """Which rows a version reads: those past the mark `since` up to `until`, split into
    `partitions` reads on the partition column between `bounds`."""

    since: str | None = None
    until: str | None = None
    rows_without_mark: int = 0
    bounds: tuple[int, int] | None = None
    partitions: int = 1


def plan_read(snap: Snapshot, source: JdbcSource, since: str | None, name: str) -> ReadPlan:
    """The marks and bounds of a read, found in the snapshot it will read."""
    until, without = None, 0
    if source.incremental:
        column = quoted(source.incremental.column)
        kind = snap.type_of(column, relation(source))
        if kind not in MARKABLE:
            raise SourceRefused(
                f"{name}: column {source.incremental.column} is {kind} in the database; an incremental "
                "read needs an integer, date or timestamp column, whose order is the values' order"
            )
        after = f" WHERE {column} > {literal(since)}" if since else ""
        until, nulls = snap.row(
            f"SELECT (SELECT max({column})::text FROM {relation(source)}{after}), "
            f"(SELECT count(*) FROM {relation(source)} WHERE {column} IS NULL)"
        )
        if until is None:
            past = f" past {source.incremental.column} {since}" if since else ""
            raise NotFound(f"no rows of {name}{past}; nothing to ingest")
        without = int(nulls or 0)
    plan = ReadPlan(since, until, without)
    if not source.partition_column:
        return plan
    partitions = source.num_partitions or 4
    if source.lower_bound is not None and source.upper_bound is not None:
        return ReadPlan(since, until, without, (source.lower_bound, source.upper_bound), partitions)
    column = quoted(source.partition_column)
    low, high = snap.row(
        f"SELECT min({column})::text, max({column})::text FROM {relation(source)}{marked(source, plan)}"
    )
    if low is None or high is None or low == high:
        return plan
    try:
        return ReadPlan(since, until, without, (int(low), int(high)), partitions)
    except ValueError as err:
        raise SourceRefused(
            f"{name}: partition_column {source.partition_column} holds {shown(low)}, not a whole "
            "number; split the read on an integer column"
        ) from err


def relation(source: JdbcSource) -> str:
    """The source as a relation SQL can select from."""
    # The query on lines of its own: a comment on its last line must not swallow what follows.
    return source.table if source.table else f"(\n{source.statement}\n) AS custody_query"


def marked(source: JdbcSource, plan: ReadPlan) -> str:
    """The WHERE clause that keeps a read to the rows between its marks."""
    if not source.incremental or plan.until is None:
        return ""
    column = quoted(source.incremental.column)
    upper = f"{column} <= {literal(plan.until)}"
    return f" WHERE {column} > {literal(plan.since)} AND {upper}" if plan.since else f" WHERE {upper}"


def quoted(column: str) -> str:
    """A column's name in PostgreSQL's SQL; a spec's column names are letters, digits and _."""
    return f'"{column}"'


def literal(mark: str | None) -> str:
    if mark is None or not MARK.fullmatch(mark):
        raise SourceRefused(f"high-water mark {shown(str(mark))} is not a number, date or time")
    return f"'{mark}'"


def read(
    spark: SparkSession, source: JdbcSource, place: Place, login: Credentials, snap: Snapshot, plan: ReadPlan
) -> DataFrame:
    """The rows of the plan as a DataFrame; each of its connections reads the snapshot `snap`.

    Filters stay in Spark (pushDownPredicate off): the checks' filters, pushed into the database,
    would skip rows before the scan counts them as read."""
    reader = (
        spark.read.format("jdbc")
        .option("url", place.url)
        .option("driver", DRIVER)
        .option("user", login.user)
        .option("password", login.password)
        .option("dbtable", f"(SELECT * FROM {relation(source)}{marked(source, plan)}) AS custody_source")
        .option("fetchsize", str(source.fetch_size))
        .option("pushDownPredicate", "false")
        # A fetch size turns the driver's autocommit off, so these open the transaction that reads.
        .option(
            "sessionInitStatement",
            "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY; "
            f"SET TRANSACTION SNAPSHOT '{snap.snapshot_id}'",
        )
    )
    if plan.bounds is not None and source.partition_column:
        low, high = plan.bounds
        reader = (
            reader.option("partitionColumn", source.partition_column)
            .option("lowerBound", str(low))
            .option("upperBound", str(high))
            .option("numPartitions", str(plan.partitions))
        )
    return reader.load()


def parse(frame: DataFrame, spec: Spec, place: Place) -> Parsed:
    """The rows that land, cast to the declared types, and the rows refused with the reason: a
    value its declared type cannot hold, or a null in a column declared not nullable."""
    found = {f.name: f.dataType for f in frame.schema.fields}
    declared = [c.name for c in spec.body.columns]
    if set(declared) != set(found):
        raise SourceRefused(
            f"{place.name} does not have the columns of the spec of {spec.key}: "
            f"{column_difference(declared, list(found))}"
        )
    converted: dict[str, Column] = {}
    conversions = []
    for column in spec.body.columns:
        have, want = found[column.name], spark_type(column.type)
        if have == want:
            continue
        if not _convertible(have, want):
            raise SourceRefused(
                f"{place.name}: column {column.name} is {have.simpleString()} in the database; "
                f"the spec of {spec.key} declares {column.type}, which it cannot be converted to"
            )
        value = F.col(column.name)
        cast = converted[column.name] = value.try_cast(want)
        lost = (value.isNotNull() & cast.isNull()) | _changed(value, cast, have, want)
        conversions.append((lost, F.lit(f"column {column.name} is not a valid {column.type}")))
    # Names where a column is taken as it is: each Column built costs a call into the JVM.
    outputs = [converted[name].alias(name) if name in converted else name for name in declared]

    def reason() -> Column:
        checks = value_checks(spec.body.columns, lambda name: converted.get(name, F.col(name)), TextChecks())
        return first_reason([*conversions, *checks])

    def checked() -> DataFrame:
        return frame.filter(reason().isNull()).select(*outputs)

    def refused() -> DataFrame:
        raw = F.to_json(F.struct(*[F.col("`" + name.replace("`", "``") + "`") for name in found]))
        why = reason()
        return frame.filter(why.isNotNull()).select(
            F.lit(place.name).alias("file"), why.alias("reason"), raw.alias("record")
        )

    if conversions:
        return Parsed(checked(), refused)
    # Only nullability to check: the written files' statistics tell whether a required column holds
    # a null, which costs nothing; only then are the rows written again, filtered.
    required = tuple(c.name for c in spec.body.columns if not c.nullable)
    return Parsed(frame.select(*outputs), refused, nulls_unchecked=required, checked=checked)


def _changed(value: Column, cast: Column, have: T.DataType, want: T.DataType) -> Column:
    """Where converting a value would change it rather than only retype it: a fraction, a time of
    day or decimal places dropped, a number too large for the type, text that is not in the form
    the type is written in."""
    if isinstance(want, T.StringType):
        return F.lit(False)
    if isinstance(want, (T.FloatType, T.DoubleType)):
        # Approximate types hold most decimals only approximately: only an overflow is a change.
        infinite = F.abs(cast) == F.lit(float("inf"))
        given = value.rlike("(?i)inf") if isinstance(have, T.StringType) else F.abs(value) == F.lit(float("inf"))
        return F.coalesce(infinite & ~given, F.lit(False))
    if isinstance(have, T.StringType):
        form = _text_form(want)
        return F.coalesce(~value.rlike(form), F.lit(False)) if form else F.lit(False)
    return F.coalesce(cast.cast(have) != value, F.lit(False))


def _text_form(want: T.DataType) -> str | None:
    """The form text must have to be read as `want` whole, where Spark would read more loosely."""
    if isinstance(want, T.DateType):
        return r"^\s*[0-9]{4}-[0-9]{2}-[0-9]{2}\s*$"
    if isinstance(want, (T.TimestampType, T.TimestampNTZType)):
        return r"^\s*[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]+)?)?)?(Z|[+-][0-9]{2}(:?[0-9]{2})?)?\s*$"
    if isinstance(want, T.DecimalType) and want.scale:
        return rf"^\s*[+-]?([0-9]+(\.[0-9]{{0,{want.scale}}})?|\.[0-9]{{1,{want.scale}}})\s*$"
    if isinstance(want, (T.DecimalType, T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        return r"^\s*[+-]?[0-9]+\s*$"
    if isinstance(want, T.BooleanType):
        return r"^\s*(?i:true|false)\s*$"
    return None


def _convertible(have: T.DataType, want: T.DataType) -> bool:
    if isinstance(have, T.StringType) or isinstance(want, T.StringType):
        return True
    if isinstance(have, T.NumericType) and isinstance(want, T.NumericType):
        return True
    return isinstance(have, TEMPORAL) and isinstance(want, TEMPORAL)
