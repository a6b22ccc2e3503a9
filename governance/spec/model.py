"""Asset specs: one YAML file per asset, validated as a whole folder with every problem reported at once."""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache, cached_property
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any, Literal

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from governance import yamlsource
from governance.access.directory import NAME as USER_NAME
from governance.config import is_dotted_name
from governance.errors import InvalidInput, InvalidName, SpecError, SpecProblem, UnsafeYaml
from governance.spec import classification
from governance.spec.cache import SpecCache, cache_file
from governance.spec.classification import RANK, Classification
from governance.spec.cron import check_cron
from governance.spec.messages import error_path, owner_message
from governance.yamlsource import LocatedYaml, load_located, read_capped
from governance.zones import AssetKey, check_name

COLUMN_TYPE = re.compile(
    r"string|int|long|short|byte|double|float|boolean|date|timestamp|binary"
    r"|decimal\((?P<precision>[1-9][0-9]?),\s*(?P<scale>[0-9][0-9]?)\)"
)
# COLUMN_TYPE as JSON Schema writes a pattern (ECMA 262: no named groups).
COLUMN_TYPE_PATTERN = "^(" + re.sub(r"\?P<\w+>", "", COLUMN_TYPE.pattern) + ")$"
GROUP_NAME = r"^[a-z][a-z0-9_-]{0,63}$"
COLUMN_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
TRANSFORM_REF = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"
ASSET_REF = r"^[a-z][a-z0-9_]{0,62}/[a-z][a-z0-9_]{0,62}$"
# A PostgreSQL JDBC URL names its host and database; its user and password come from the environment.
JDBC_URL = r"^jdbc:postgresql://[A-Za-z0-9.\-]+(:[0-9]{1,5})?/[A-Za-z0-9_\-]+(\?[^#\s]*)?$"
# Schema-qualified: a bare name would be found through the user's search_path, unseen in the catalog.
TABLE_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,62}\.[A-Za-z_][A-Za-z0-9_]{0,62}$"
ENV_NAME = r"^[A-Z_][A-Z0-9_]{0,127}$"
# A Kafka topic Custody governs: dot-separated lowercase words, without the '-' that begins the
# names of its consumers' groups.
TOPIC_NAME = r"^[a-z][a-z0-9_]{0,62}(\.[a-z][a-z0-9_]{0,62}){0,3}$"
# A feed's URL may take its host, path or query from the environment, never its scheme.
FEED_URL = r"^https?://[^\s]+$"
HEADER_NAME = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$"
DURATION = re.compile(r"(?P<count>[1-9][0-9]{0,5})(?P<unit>ms|s|m|h)")
UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
CREDENTIAL_PARAMETERS = ("user", "password", "sslpassword")
INTEGRAL = frozenset({"byte", "short", "int", "long"})
MARK_TYPES = INTEGRAL | {"date", "timestamp"}
MAX_SPEC_BYTES = 256 * 1024
MAX_DECIMAL_PRECISION = 38


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


class Column(_Strict):
    name: Annotated[str, Field(pattern=COLUMN_NAME)]
    # The model's own check below says what is wrong; the pattern is for editors, in the published schema.
    type: Annotated[str, Field(json_schema_extra={"pattern": COLUMN_TYPE_PATTERN})]
    nullable: bool = True
    description: str = ""

    @model_validator(mode="after")
    def _known_type(self) -> Column:
        match = COLUMN_TYPE.fullmatch(self.type)
        if match is None:
            raise ValueError(
                f"unknown column type {self.type!r}; use string, int, long, short, byte, double, "
                "float, boolean, date, timestamp, binary or decimal(P,S)"
            )
        if match.group("precision") and int(match.group("precision")) > MAX_DECIMAL_PRECISION:
            raise ValueError(
                f"decimal precision over {MAX_DECIMAL_PRECISION} in {self.type!r}: Spark, Parquet and Iceberg "
                f"keep at most {MAX_DECIMAL_PRECISION} digits"
            )
        if match.group("precision") and int(match.group("scale")) > int(match.group("precision")):
            raise ValueError(f"decimal scale exceeds precision in {self.type!r}")
        return self


GroupName = Annotated[str, Field(pattern=GROUP_NAME)]


class Roles(_Strict):
    owner: GroupName
    producer: GroupName
    consumer: GroupName


def duration_seconds(text: str) -> float:
    """The seconds of a duration a validator accepted (`500ms`, `10s`, `2m`, `1h`)."""
    match = DURATION.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration: a count and a unit, e.g. 500ms, 5s, 2m or 1h")
    return int(match["count"]) * UNIT_SECONDS[match["unit"]]


def _duration_within(text: str, low: float, high: float, said: str) -> str:
    if not low <= duration_seconds(text) <= high:
        raise ValueError(f"{text!r} is not between {said}")
    return text


class Feed(_Strict):
    """A URL downloaded on a period, kept by the hour (seed 001's Hoard); each hour lands as a batch.

    `url` and `headers` are templates: `${NAME}` is the collector's environment variable NAME."""

    url: Annotated[str, Field(pattern=FEED_URL, max_length=4096)]
    headers: dict[Annotated[str, Field(pattern=HEADER_NAME)], Annotated[str, Field(max_length=8192)]] = {}
    every: str
    postfix: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{0,32}$")] = ""
    max_bytes: Annotated[int, Field(ge=1, le=10 * 1024**3)] = 100 * 1024**2
    timeout: Annotated[float, Field(gt=0, le=600)] = 30.0
    # The producer each hour's batch is ingested for; the collector asserts it.
    requested_by: Annotated[str, Field(pattern=f"^{USER_NAME.pattern}$")]
    # The first hour kept: where the asset's hourly partitions begin in Dagster.
    start: Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}$")]

    @field_validator("every")
    @classmethod
    def _known_period(cls, every: str) -> str:
        return _duration_within(every, 0.1, 3600, "100ms and 1h")

    @field_validator("start")
    @classmethod
    def _real_hour(cls, start: str) -> str:
        try:
            datetime.strptime(start, "%Y-%m-%dT%H")
        except ValueError as err:
            raise ValueError(f"{start!r} is not an hour of a calendar day") from err
        return start

    @property
    def first_hour(self) -> datetime:
        return datetime.strptime(self.start, "%Y-%m-%dT%H").replace(tzinfo=UTC)

    @property
    def period(self) -> float:
        """Seconds between two downloads."""
        return duration_seconds(self.every)


# A lag: a whole number of minutes, hours or days.
LAG = r"^[1-9][0-9]{0,5}[mhd]$"
LAG_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


def lag(text: str) -> timedelta:
    return timedelta(**{LAG_UNITS[text[-1]]: int(text[:-1])})


class FileSource(_Strict):
    """Files a producer drops in the DropZone, or that a feed's collector downloads; a feed's may
    also be kept `raw`, each download a row."""

    format: Literal["csv", "json", "parquet", "raw"]
    header: bool = True
    delimiter: Annotated[str, Field(min_length=1, max_length=1)] = ","
    multiline: bool = False
    feed: Feed | None = None


class Incremental(_Strict):
    column: Annotated[str, Field(pattern=COLUMN_NAME)]


class JdbcSource(_Strict):
    """A table or query of a PostgreSQL database, read through Spark's JDBC reader."""

    format: Literal["jdbc"]
    url: Annotated[str, Field(pattern=JDBC_URL)]
    user_env: Annotated[str, Field(pattern=ENV_NAME)]
    password_env: Annotated[str, Field(pattern=ENV_NAME)]
    table: Annotated[str, Field(pattern=TABLE_NAME)] | None = None
    query: Annotated[str, Field(min_length=1, max_length=100_000)] | None = None
    partition_column: Annotated[str, Field(pattern=COLUMN_NAME)] | None = None
    lower_bound: int | None = None
    upper_bound: int | None = None
    num_partitions: Annotated[int, Field(ge=1, le=1000)] | None = None
    fetch_size: Annotated[int, Field(ge=1, le=1_000_000)] = 10_000
    incremental: Incremental | None = None

    @model_validator(mode="after")
    def _one_reading(self) -> JdbcSource:
        problems = []
        if (self.table is None) == (self.query is None):
            problems.append("give either a table or a query")
        if self.query is not None and ";" in self.query.rstrip().rstrip(";"):
            problems.append("a query is one SELECT statement, without ;")
        if (self.lower_bound is None) != (self.upper_bound is None):
            problems.append("give lower_bound and upper_bound together, or neither to take them from the data")
        elif self.lower_bound is not None and self.upper_bound is not None and self.lower_bound >= self.upper_bound:
            problems.append("lower_bound must be below upper_bound")
        if self.partition_column is None and (self.lower_bound is not None or self.num_partitions is not None):
            problems.append("bounds and num_partitions split the read on a partition_column; name one")
        parameters = self.url.partition("?")[2].split("&")
        if any(p.partition("=")[0].lower() in CREDENTIAL_PARAMETERS for p in parameters):
            problems.append("the url holds credentials; name the variables that hold them in user_env and password_env")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def statement(self) -> str:
        """The query without the semicolon an owner may end it with."""
        return (self.query or "").rstrip().rstrip(";").rstrip()


class StreamSource(_Strict):
    """Records producers push to a Kafka topic (seed 003): the topic's ACLs follow the asset's roles,
    and each landing takes the records since the last version's end as one version. The DropZone
    sensor lands it once `land_after` records wait, or every `land_every` while any wait."""

    format: Literal["kafka"]
    # The topic; by default `<domain>.<name>`. Its consumers' groups are named `<topic>-…`.
    topic: Annotated[str, Field(pattern=TOPIC_NAME)] | None = None
    records: Literal["json", "text"] = "json"
    partitions: Annotated[int, Field(ge=1, le=1000)] = 1
    # How long Kafka keeps a record: past it, a record not landed yet is a recorded gap.
    retention: Annotated[str, Field(pattern=LAG)] = "7d"
    land_after: Annotated[int, Field(ge=1, le=100_000_000)] = 10_000
    land_every: str = "1m"

    @field_validator("land_every")
    @classmethod
    def _period(cls, every: str) -> str:
        return _duration_within(every, 1, 86_400, "1s and 24h")

    @property
    def period(self) -> float:
        """Seconds between two landings while records wait."""
        return duration_seconds(self.land_every)

    @property
    def retention_ms(self) -> int:
        return int(lag(self.retention).total_seconds() * 1000)


Source = Annotated[FileSource | JdbcSource | StreamSource, Field(discriminator="format")]


class Retention(_Strict):
    keep_versions: Annotated[int, Field(ge=1)] | None = None
    max_age_days: Annotated[int, Field(ge=1)] | None = None


class Freshness(_Strict):
    """How old the newest version may grow: past `warn_lag` the asset warns, past `max_lag` it fails
    its freshness (Dagster's time-window freshness policy, folded into the asset's health)."""

    max_lag: Annotated[str, Field(pattern=LAG)]
    warn_lag: Annotated[str, Field(pattern=LAG)] | None = None

    @model_validator(mode="after")
    def _warn_first(self) -> Freshness:
        if self.warn_lag is not None and lag(self.warn_lag) >= lag(self.max_lag):
            raise ValueError(f"warn_lag ({self.warn_lag}) must be shorter than max_lag ({self.max_lag})")
        return self


class Automation(_Strict):
    """When Dagster's Declarative Automation materializes the asset by itself, as the directory's
    service account its daemon runs as (which needs the asset's producer role, as anyone does):
    `on_cron` after each tick of a cron schedule once every input has a version since that tick,
    `eager` whenever an input gets a new version, `on_missing` once when the asset has none."""

    on_cron: str | None = None
    eager: Literal[True] | None = None
    on_missing: Literal[True] | None = None

    @field_validator("on_cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return check_cron(value)
        except InvalidInput as err:
            raise ValueError(str(err)) from err

    @model_validator(mode="after")
    def _one(self) -> Automation:
        given = [name for name in ("on_cron", "eager", "on_missing") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"give one of on_cron, eager or on_missing, not {len(given)}")
        return self


class AssetSpec(_Strict):
    """The body of one spec file."""

    description: Annotated[str, Field(min_length=1)]
    roles: Roles
    zone: Literal["landing", "integration"]
    classification: Classification = Classification.INTERNAL
    pii: bool = False
    tags: dict[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_.-]{0,62}$")], str] = {}
    source: Source | None = None
    inputs: list[Annotated[str, Field(pattern=ASSET_REF)]] = []
    transform: Annotated[str, Field(pattern=TRANSFORM_REF)] | None = None
    version_label_from: str | None = None
    columns: list[Column] = []
    bad_rows: Literal["quarantine", "fail"] = "quarantine"
    max_bad_fraction: Annotated[float, Field(ge=0.0, le=1.0)] = 0.01
    retention: Retention = Retention()
    # Runs of this asset in progress at once; the queue holds the others back.
    max_concurrent_runs: Annotated[int, Field(ge=1, le=100)] = 1
    freshness: Freshness | None = None
    automation: Automation | None = None

    @model_validator(mode="after")
    def _zone_fields(self) -> AssetSpec:
        problems = []
        if self.zone == "landing":
            if self.automation and isinstance(self.source, FileSource):
                problems.append(
                    "a landing asset of files is ingested batch by batch by the DropZone sensor: "
                    "automation is for integration assets and database sources"
                )
            if self.automation and isinstance(self.source, StreamSource):
                problems.append(
                    "a landing asset of a topic is landed by the DropZone sensor as its records wait "
                    "(source.land_after, source.land_every): automation is for integration assets and database sources"
                )
            if self.source is None:
                problems.append("a landing asset needs a source")
            if self.inputs or self.transform or self.version_label_from:
                problems.append("a landing asset takes no inputs, transform or version_label_from")
            if self.source and self.source.format in ("csv", "jdbc") and not self.columns:
                problems.append(f"a {self.source.format.upper()} source needs its columns declared")
            if isinstance(self.source, JdbcSource):
                problems += _jdbc_column_problems(self.source, self.columns)
            if isinstance(self.source, FileSource) and self.source.feed and self.source.format == "parquet":
                problems.append("a feed's downloads are read as json or csv, or kept raw")
            if isinstance(self.source, FileSource) and self.source.format == "raw":
                if not self.source.feed:
                    problems.append("raw is for a feed's downloads: declare source.feed")
                if self.columns:
                    problems.append(
                        "a raw feed's columns are fixed (file, fetched_at, bytes, sha256, content): declare none"
                    )
        else:
            if self.source is not None:
                problems.append("an integration asset has no source; it reads its inputs")
            if not self.inputs or not self.transform:
                problems.append("an integration asset needs inputs and a transform")
        if self.version_label_from and self.version_label_from not in self.inputs:
            problems.append(f"version_label_from {self.version_label_from!r} is not one of the inputs")
        if len(set(self.inputs)) != len(self.inputs):
            problems.append("inputs are listed twice")
        names = [column.name for column in self.columns]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            problems.append(f"columns declared twice: {', '.join(twice)}")
        if problems:
            raise ValueError("; ".join(problems))
        return self


def _jdbc_column_problems(source: JdbcSource, columns: list[Column]) -> list[str]:
    declared = {column.name: column for column in columns}
    problems = []
    split = declared.get(source.partition_column or "")
    if source.partition_column and columns and (split is None or split.type not in INTEGRAL):
        problems.append(
            f"partition_column {source.partition_column!r} must be a declared column of type int, long, short or byte"
        )
    if source.incremental:
        mark = declared.get(source.incremental.column)
        if columns and (mark is None or mark.type not in MARK_TYPES or mark.nullable):
            problems.append(
                f"incremental column {source.incremental.column!r} must be a declared column, "
                "nullable: false, of type int, long, short, byte, date or timestamp"
            )
    return problems


def spec_schema() -> dict[str, Any]:
    """The JSON Schema of a spec file, from the model that validates it: what an editor needs to
    complete fields and flag wrong ones. Rules that span fields (a landing asset needs a source)
    stay `custody specs check`'s."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **AssetSpec.model_json_schema(),
        "title": "Custody asset spec",
        "description": "One asset of Custody: its roles, zone, source or inputs, columns and rules.",
    }


@dataclass(frozen=True)
class Spec:
    """A validated spec with its key, file and content hash."""

    key: AssetKey
    file: Path
    body: AssetSpec
    canonical: str | None = field(default=None, compare=False, repr=False)

    @property
    def is_landing(self) -> bool:
        return self.body.zone == "landing"

    def line_of(self, path: str) -> int | None:
        """The line of a field (`roles.owner`) in the spec's file, as it is now; None if it no longer parses."""
        return _line_in(self.file, path)

    @property
    def stream_source(self) -> StreamSource | None:
        """The topic of an asset landed from Kafka, or None."""
        source = self.body.source
        return source if isinstance(source, StreamSource) else None

    @property
    def topic(self) -> str | None:
        """The Kafka topic the asset lands, when it lands one: the spec's, or `<domain>.<name>`."""
        source = self.stream_source
        return None if source is None else source.topic or f"{self.key.domain}.{self.key.name}"

    @property
    def reads_database(self) -> bool:
        """A landing asset read from a database: it has no DropZone batches."""
        return isinstance(self.body.source, JdbcSource)

    @property
    def feed(self) -> Feed | None:
        source = self.body.source
        return source.feed if isinstance(source, FileSource) else None

    @property
    def declared_feed(self) -> Feed:
        """The feed of an asset that must have one."""
        if self.feed is None:
            raise InvalidInput(f"{self.key} declares no feed")
        return self.feed

    @property
    def file_source(self) -> FileSource:
        """The source of an asset that must be read from files."""
        source = self.body.source
        if not isinstance(source, FileSource):
            raise InvalidInput(f"{self.key} is not read from files")
        return source

    @property
    def database_source(self) -> JdbcSource:
        """The source of an asset that must be read from a database."""
        source = self.body.source
        if not isinstance(source, JdbcSource):
            raise InvalidInput(f"{self.key} is not read from a database")
        return source

    @property
    def reads_topic(self) -> bool:
        """A landing asset landed from a Kafka topic: it has no DropZone batches."""
        return isinstance(self.body.source, StreamSource)

    @property
    def takes_batches(self) -> bool:
        """A landing asset its producers drop batches for."""
        return self.is_landing and not self.reads_database and not self.reads_topic

    @cached_property
    def inputs(self) -> tuple[AssetKey, ...]:
        return tuple(AssetKey.parse(ref) for ref in self.body.inputs)

    @cached_property
    def as_json(self) -> str:
        """The canonical form: formatting and comments of the YAML do not change it."""
        if self.canonical is not None:
            return self.canonical
        return json.dumps(self.body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    @cached_property
    def hash(self) -> str:
        return hashlib.sha256(self.as_json.encode()).hexdigest()


@dataclass(frozen=True)
class SpecSet:
    """All specs of a folder, in dependency order (inputs before the assets that read them)."""

    root: Path
    specs: Mapping[AssetKey, Spec]

    def __getitem__(self, key: AssetKey) -> Spec:
        return self.specs[key]

    def __iter__(self):
        return iter(self.specs.values())

    def __len__(self) -> int:
        return len(self.specs)

    def get(self, key: AssetKey) -> Spec | None:
        return self.specs.get(key)


def load_specs(root: Path, cache_dir: Path | None = None, *, transform_packages: tuple[str, ...]) -> SpecSet:
    """Load and validate every spec under `root`; raise SpecError listing every problem.

    A transform must be in one of `transform_packages` (or one of their subpackages). With
    `cache_dir`, files whose exact bytes were validated before skip the YAML parse.
    """
    specs, problems = _collect_cached(Path(root), cache_dir, transform_packages)
    if problems:
        raise SpecError(problems)
    return SpecSet(Path(root), specs)


@dataclass(frozen=True)
class LoadedSpecs:
    """What a folder holds that can run, and what cannot: the specs valid with every spec upstream of
    them, and the problems of each other asset (its own, or an input's)."""

    specs: SpecSet
    broken: Mapping[AssetKey, tuple[SpecProblem, ...]]
    # Problems of files that name no asset: a misplaced file, a name that breaks the rules.
    unplaced: tuple[SpecProblem, ...] = ()
    # Broken assets whose file itself was read: what they name (an input, a transform) is the problem.
    parsed: Mapping[AssetKey, Spec] = field(default_factory=dict)


def folder_stamp(root: Path) -> int:
    """What changes whenever a spec file under `root` is added, removed, renamed or written: each
    file's name, size, time of change and inode, taken without reading one."""
    found = []
    with suppress(FileNotFoundError, NotADirectoryError):
        for domain in os.scandir(root):
            if domain.is_dir(follow_symlinks=False):
                for entry in os.scandir(domain.path):
                    stat = entry.stat()
                    found.append(
                        (domain.name, entry.name, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino)
                    )
    return hash(tuple(sorted(found)))


def load_valid_specs(root: Path, cache_dir: Path | None = None, *, transform_packages: tuple[str, ...]) -> LoadedSpecs:
    """Like `load_specs`, but one broken spec takes down only its own asset and those downstream."""
    root = Path(root)
    return _partitioned(root, *_collect_cached(root, cache_dir, transform_packages))


def load_upstream(
    root: Path, keys: Iterable[AssetKey], cache_dir: Path | None = None, *, transform_packages: tuple[str, ...]
) -> LoadedSpecs:
    """Like `load_valid_specs`, for the assets `keys` names and every asset upstream of them only,
    each read from its own file: what a run of a few assets among thousands needs. A key no file
    declares is left out, for the caller to name as unknown."""
    root = Path(root)
    if not root.is_dir():
        return _partitioned(root, {}, [SpecProblem(str(root), "", "spec folder not found")])
    model = _model_fingerprint() if cache_dir else None
    cache = SpecCache.open(cache_file(cache_dir, root) if cache_dir and model else None, model or "")
    problems: list[SpecProblem] = []
    specs: dict[AssetKey, Spec] = {}
    declared: dict[AssetKey, Path] = {}
    waiting, seen = list(keys), set()
    while waiting:
        key = waiting.pop()
        if key in seen:
            continue
        seen.add(key)
        found = [file for suffix in (".yaml", ".yml") if (file := root / key.domain / f"{key.name}{suffix}").is_file()]
        if len(found) > 1:
            twice = f"{key} is declared twice: by {found[0].name} and {found[1].name}; keep one"
            problems.append(SpecProblem(str(found[1]), "", twice))
            continue
        if not found:
            continue
        declared[key] = found[0]
        spec = _load_one(root, found[0], problems, cache)
        if spec is not None:
            specs[key] = spec
            waiting.extend(spec.inputs)
    # The other specs' entries stay: a partial load prunes nothing from the cache.
    cache.save(prune=False)
    problems.extend(_cross_checks(specs, transform_packages, declared))
    return _partitioned(root, _dependency_order(specs, problems), problems)


def _partitioned(root: Path, specs: Mapping[AssetKey, Spec], problems: list[SpecProblem]) -> LoadedSpecs:
    """The specs valid with every spec upstream of them, apart from the others, each with its problems."""
    by_key: dict[AssetKey, list[SpecProblem]] = {}
    unplaced = []
    for problem in problems:
        key = _key_of(root, Path(problem.file))
        if key is None:
            unplaced.append(problem)
        else:
            by_key.setdefault(key, []).append(problem)
    valid: dict[AssetKey, Spec] = {}
    for key, spec in specs.items():  # inputs first
        if key in by_key:
            continue
        blocked = [source for source in spec.inputs if source not in valid]
        if blocked:
            by_key[key] = [
                SpecProblem(
                    str(spec.file), "inputs", f"input {source} cannot be loaded: its spec or one upstream is invalid"
                )
                for source in blocked
            ]
            continue
        valid[key] = spec
    broken = {key: tuple(found) for key, found in by_key.items()}
    parsed = {key: spec for key, spec in specs.items() if key in broken}
    return LoadedSpecs(SpecSet(root, valid), broken, tuple(unplaced), parsed)


def _key_of(root: Path, file: Path) -> AssetKey | None:
    """The asset a spec file declares, when its place and name say one."""
    try:
        relative = file.relative_to(root)
    except ValueError:
        return None
    if len(relative.parts) != 2 or file.suffix not in (".yaml", ".yml"):
        return None
    try:
        return AssetKey(check_name(relative.parts[0], "domain"), check_name(relative.stem, "asset name"))
    except InvalidName:
        return None


def check_specs(root: Path, cache_dir: Path | None = None, *, transform_packages: tuple[str, ...]) -> list[SpecProblem]:
    """Every problem of the specs under `root`; each file is validated in full, and with
    `cache_dir` the valid ones are remembered for the next load."""
    return _collect_cached(Path(root), cache_dir, transform_packages, trust_cache=False)[1]


def _collect_cached(
    root: Path, cache_dir: Path | None, transform_packages: tuple[str, ...], *, trust_cache: bool = True
) -> tuple[dict[AssetKey, Spec], list[SpecProblem]]:
    model = _model_fingerprint() if cache_dir else None
    path = cache_file(cache_dir, root) if cache_dir and model else None
    cache = SpecCache.open(path, model or "") if trust_cache else SpecCache(path, model or "")
    collected = _collect(root, cache, transform_packages)
    cache.save()
    return collected


@cache
def _model_fingerprint() -> str | None:
    """Changes whenever the code that parses and validates a spec could: this module, the
    classifications, the YAML loader, pydantic. None where the sources are not installed: then
    nothing is cached."""
    try:
        modules = (sys.modules[__name__], classification, yamlsource)
        sources = [inspect.getsource(module) for module in modules]
    except (OSError, TypeError):
        return None
    return hashlib.sha256("\n".join([pydantic.VERSION, *sources]).encode()).hexdigest()


def _collect(
    root: Path, cache: SpecCache, transform_packages: tuple[str, ...]
) -> tuple[dict[AssetKey, Spec], list[SpecProblem]]:
    if not root.is_dir():
        return {}, [SpecProblem(str(root), "", "spec folder not found")]
    problems: list[SpecProblem] = []
    specs: dict[AssetKey, Spec] = {}
    files = sorted(root.rglob("*.yaml"), key=str) + sorted(root.rglob("*.yml"), key=str)
    declared: dict[AssetKey, Path] = {}
    for file in files:
        key = _key_of(root, file)
        if key in declared:
            problems.append(
                SpecProblem(
                    str(file), "", f"{key} is declared twice: by {declared[key].name} and {file.name}; keep one"
                )
            )
            specs.pop(key, None)
            continue
        if key is not None:
            declared[key] = file
        spec = _load_one(root, file, problems, cache)
        if spec is not None:
            specs[spec.key] = spec
    problems.extend(_cross_checks(specs, transform_packages, declared))
    ordered = _dependency_order(specs, problems)
    return ordered, problems


def _load_one(root: Path, file: Path, problems: list[SpecProblem], cache: SpecCache) -> Spec | None:
    shown = str(file)
    relative = file.relative_to(root)
    if len(relative.parts) != 2:
        problems.append(SpecProblem(shown, "", "spec files live at <domain>/<name>.yaml"))
        return None
    domain, name = relative.parts[0], relative.stem
    key_ok = True
    for value, what in ((domain, "domain"), (name, "asset name")):
        try:
            check_name(value, what)
        except InvalidName as err:
            problems.append(SpecProblem(shown, "", str(err)))
            key_ok = False
    try:
        raw, size = read_capped(file, MAX_SPEC_BYTES)
    except OSError as err:
        problems.append(SpecProblem(shown, "", f"cannot read: {err}"))
        return None
    if size > MAX_SPEC_BYTES:
        limit = f"{MAX_SPEC_BYTES:,} bytes ({MAX_SPEC_BYTES // 1024} KB)"
        problems.append(SpecProblem(shown, "", f"{size:,} bytes, more than the {limit} a spec file may hold"))
        return None
    digest = hashlib.sha256(raw).hexdigest()
    cached = _from_cache(cache, digest) if key_ok else None
    if cached is not None:
        return Spec(AssetKey(domain, name), file, *cached)
    try:
        located = load_located(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        problems.append(SpecProblem(shown, "", f"cannot read: {err}"))
        return None
    except UnsafeYaml as err:
        problems.append(SpecProblem(shown, "", err.reason, err.line))
        return None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = mark.line + 1 if mark else None
        problems.append(SpecProblem(shown, "", f"not valid YAML: {getattr(err, 'problem', err)}", line))
        return None
    for path, line in located.duplicates:
        problems.append(SpecProblem(shown, path, "duplicate key", line))
    if not isinstance(located.data, dict):
        problems.append(SpecProblem(shown, "", "a spec is a YAML mapping of fields", 1))
        return None
    try:
        body = AssetSpec.model_validate(located.data)
    except ValidationError as err:
        problems.extend(_from_validation(shown, err, located))
        return None
    if located.duplicates or not key_ok:
        return None
    spec = Spec(AssetKey(domain, name), file, body)
    cache.put(digest, spec.as_json)
    return spec


def _from_cache(cache: SpecCache, digest: str) -> tuple[AssetSpec, str] | None:
    canonical = cache.get(digest)
    if canonical is None:
        return None
    try:
        return AssetSpec.model_validate_json(canonical), canonical
    except ValidationError:
        return None  # an entry edited by hand: the file is parsed instead


def _from_validation(file: str, err: ValidationError, located: LocatedYaml) -> Iterable[SpecProblem]:
    for detail in err.errors(include_url=False):
        path = error_path(detail)
        yield SpecProblem(file, path, owner_message(detail), located.line_of(path))


def _cross_checks(
    specs: dict[AssetKey, Spec], transform_packages: tuple[str, ...], declared: Mapping[AssetKey, Path]
) -> Iterable[SpecProblem]:
    for spec in specs.values():
        file = str(spec.file)
        for i, key in enumerate(spec.inputs):
            if key in declared and key not in specs:
                yield SpecProblem(
                    file, f"inputs.{i}", f"input {str(key)!r} has an invalid spec, {declared[key]}: fix it first"
                )
            elif key not in specs:
                yield SpecProblem(file, f"inputs.{i}", f"unknown input {str(key)!r}: no spec declares it")
        names = [key.name for key in spec.inputs]
        clashing = sorted({n for n in names if names.count(n) > 1})
        if clashing:
            yield SpecProblem(file, "inputs", f"inputs share the name {', '.join(clashing)}")
        yield from classification_problems(spec, [specs[key] for key in spec.inputs if key in specs])
        if spec.body.transform:
            # Checked on every load, cached specs included: the setting may have narrowed since.
            refused = _transform_refusal(spec.body.transform, transform_packages)
            if refused:
                yield SpecProblem(file, "transform", refused, _line_in(spec.file, "transform"))
                continue
            try:
                accepted = _accepted_keywords(spec.body.transform)
            except TransformNotFound as err:
                yield SpecProblem(file, "transform", str(err))
                continue
            missing = [name for name in names if accepted is not None and name not in accepted]
            if missing:
                yield SpecProblem(file, "transform", f"transform takes no parameter for input(s) {', '.join(missing)}")
    yield from _shared_topics(specs.values())


def _shared_topics(specs: Iterable[Spec]) -> Iterable[SpecProblem]:
    """A topic is one asset's: its versions are ranges of the topic's offsets, and its ACLs the
    asset's roles."""
    landing: dict[str, Spec] = {}
    for spec in specs:
        source, topic = spec.stream_source, spec.topic
        if source is None or topic is None:
            continue
        first = landing.setdefault(topic, spec)
        if first is not spec:
            where = "source.topic" if source.topic else "source"
            yield SpecProblem(
                str(spec.file),
                where,
                f"topic {topic} is landed by {first.key}: a topic belongs to one asset",
                _line_in(spec.file, where),
            )


def _transform_refusal(reference: str, packages: tuple[str, ...]) -> str | None:
    """Why the module of `reference` may not be imported, or None when it is one of `packages` or
    inside one. Decided on the name alone: importing a module runs its code."""
    module = reference.partition(":")[0]
    if is_dotted_name(module) and any(module == p or module.startswith(f"{p}.") for p in packages):
        return None
    allowed = ", ".join(packages)
    return (
        f"transform module {module!r} is outside the allowed transform packages ({allowed}); "
        "CUSTODY_TRANSFORM_PACKAGES names them"
    )


def _line_in(file: Path, path: str) -> int | None:
    """The line of a field in a spec validated earlier, perhaps from the cache, which keeps no
    lines; None when the file no longer parses."""
    try:
        raw, size = read_capped(file, MAX_SPEC_BYTES)
        return load_located(raw.decode("utf-8")).line_of(path) if size <= MAX_SPEC_BYTES else None
    except (OSError, UnicodeDecodeError, yaml.YAMLError, UnsafeYaml):
        return None


def sensitive_inputs(spec: Spec, inputs: Iterable[Spec]) -> list[Spec]:
    """The inputs that gate `spec`: marked pii, or classified above it."""
    rank = RANK[spec.body.classification]
    return [i for i in inputs if i.body.pii or RANK[i.body.classification] > rank]


def classification_problems(spec: Spec, inputs: Iterable[Spec]) -> list[SpecProblem]:
    """An integration asset is classified at least as high as each input it reads."""
    above = [i for i in inputs if RANK[i.body.classification] > RANK[spec.body.classification]]
    if not above:
        return []
    named = ", ".join(f"{i.key} ({i.body.classification})" for i in above)
    highest = max((i.body.classification for i in above), key=RANK.__getitem__)
    return [
        SpecProblem(
            str(spec.file),
            "classification",
            f"{spec.body.classification} is below its input(s) {named}: classify it {highest} or higher",
        )
    ]


@cache
def _accepted_keywords(reference: str) -> frozenset[str] | None:
    """The keyword parameters a transform takes; None when it takes any (**kwargs) or cannot tell."""
    try:
        params = inspect.signature(resolve_transform(reference)).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    return frozenset(params)


def _dependency_order(specs: dict[AssetKey, Spec], problems: list[SpecProblem]) -> dict[AssetKey, Spec]:
    """Kahn's algorithm; what remains unordered sits on a cycle."""
    waiting = {key: {i for i in spec.inputs if i in specs} for key, spec in specs.items()}
    dependents: dict[AssetKey, list[AssetKey]] = {key: [] for key in specs}
    for key, inputs in waiting.items():
        for upstream in inputs:
            dependents[upstream].append(key)
    ready = sorted(key for key, inputs in waiting.items() if not inputs)
    ordered: dict[AssetKey, Spec] = {}
    while ready:
        key = ready.pop()
        ordered[key] = specs[key]
        for child in dependents[key]:
            waiting[child].discard(key)
            if not waiting[child]:
                ready.append(child)
    cycle = sorted(set(specs) - set(ordered))
    for key in cycle:
        members = ", ".join(str(k) for k in cycle)
        problems.append(SpecProblem(str(specs[key].file), "inputs", f"dependency cycle among {members}"))
    return ordered


class TransformNotFound(Exception):
    """A `module:function` reference that does not resolve to a callable."""


@cache
def _import(module: str) -> ModuleType:
    return importlib.import_module(module)


def resolve_transform(reference: str) -> Callable[..., Any]:
    module_name, _, function_name = reference.partition(":")
    try:
        module = _import(module_name)
    except ImportError as err:
        raise TransformNotFound(f"transform module {module_name!r} cannot be imported: {err}") from err
    function = getattr(module, function_name, None)
    if not callable(function):
        raise TransformNotFound(f"transform {reference!r}: module has no function {function_name!r}")
    return function


@cache
def _module_source_hash(module_name: str) -> str:
    module = _import(module_name)
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        source = module_name
    return hashlib.sha256(source.encode()).hexdigest()


# What a spec says that changes the data a run makes. Its description, roles, classification, tags,
# retention, limits and column descriptions change the spec's hash, not the code version.
DATA_FIELDS = frozenset({"zone", "source", "inputs", "transform", "bad_rows", "max_bad_fraction"})


def code_version(spec: Spec) -> str:
    """Hash of what makes the asset's data: the transform's module source and the spec's inputs,
    columns and types, source format and parsing options, and quarantine rules."""
    body = json.loads(spec.as_json)  # cached with the spec: cheaper than dumping the model again
    data = {name: body.get(name) for name in sorted(DATA_FIELDS)}
    data["columns"] = [[column["name"], column["type"], column["nullable"]] for column in body.get("columns", [])]
    parts = [json.dumps(data, separators=(",", ":"))]
    if spec.body.transform:
        parts.append(_module_source_hash(spec.body.transform.partition(":")[0]))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
