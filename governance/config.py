"""Settings from the environment, read when asked for, never at import time."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from governance.errors import EnvironmentProblem, InvalidInput, shown

DEFAULT_HOME = ".custody"
# The policy settings: pinned in the catalog when first used, then changed only by an admin. Where
# an LDAP directory searches and whom it trusts belong to the directory as much as its URL does.
POLICY_VARIABLES = {
    "directory": "CUSTODY_DIRECTORY",
    "ldap_base_dn": "CUSTODY_LDAP_BASE_DN",
    "ldap_ca_file": "CUSTODY_LDAP_CA_FILE",
    "ldap_starttls": "CUSTODY_LDAP_STARTTLS",
    "admin_group": "CUSTODY_ADMIN_GROUP",
    "auditor_group": "CUSTODY_AUDITOR_GROUP",
    "lineage_group": "CUSTODY_LINEAGE_GROUP",
    "require_verified": "CUSTODY_REQUIRE_VERIFIED",
    "specs_approval": "CUSTODY_SPECS_APPROVAL",
    "os_users": "CUSTODY_OS_USERS",
}
DEFAULT_TRANSFORM_PACKAGES = ("assets.transforms",)
# A store that answers no request within this long fails the write, after S3A_ATTEMPTS tries.
S3_TIMEOUT_SECONDS = 60
# How long credentials vended to an engine last: STS's shortest, and its longest role session.
VENDED_SECONDS = (900, 43_200)
# Where Debian's libpostgresql-jdbc-java puts the PostgreSQL JDBC driver.
DEFAULT_JDBC_DRIVER = Path("/usr/share/java/postgresql.jar")
# Where `make setup` copies the jars of deploy/spark-jars/pom.xml (Iceberg's Spark runtime, SQLite's
# JDBC driver): inside the virtual environment, so each installation has its own.
SPARK_JARS_FOLDER = Path(sys.prefix) / "share" / "custody" / "jars"
URI = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://(.*)")
# How a policy switch may be spelled; it is pinned as on or off.
ON, OFF = ("on", "true", "1", "yes"), ("off", "false", "0", "no")
DROPZONE_SENSOR_SECONDS = 30
AUTOMATION_SECONDS = 30
LAKE = "CUSTODY_LAKE"
# The Custody service the CLI asks instead of the catalog and the lake, when set.
SERVICE_URL_VARIABLE = "CUSTODY_URL"
OBJECT_STORE_SCHEMES = ("s3a", "s3")
BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")


@dataclass(frozen=True)
class Settings:
    """Where Custody keeps things and which engines it talks to."""

    home: Path
    # The lake's folder; with an object-store lake, the local folder its DropZone and locks are in.
    lake: Path
    catalog_url: str
    specs: Path
    spark_master: str
    directory: str
    admin_group: str
    openlineage: str = "file"
    column_lineage: str = "on"
    column_lineage_cap: str | None = None
    require_verified: str = "restricted"
    auditor_group: str = "auditors"
    # The directory group whose service accounts may post OpenLineage events to the service.
    lineage_group: str = "lineage-reporters"
    ldap_base_dn: str = ""
    ldap_ca_file: str = ""
    ldap_starttls: str = "on"
    # on: runs use only the specs an owner applied; off: the files as they are.
    specs_approval: str = "on"
    # OS user names mapped to directory users (`root=alice,ci=svc-custody`); unlisted: the same name.
    os_users: str = ""
    # Which policy settings this process was given rather than defaulted: those must agree with the pinned ones.
    explicit: frozenset[str] = field(default=frozenset())
    dropzone_sensor: bool = True
    # How often the DropZone sensor looks for ready batches.
    dropzone_sensor_seconds: int = DROPZONE_SENSOR_SECONDS
    # How often the custody_automation sensor evaluates the specs' automation conditions.
    automation_seconds: int = AUTOMATION_SECONDS
    transform_packages: tuple[str, ...] = DEFAULT_TRANSFORM_PACKAGES
    # CUSTODY_SPARK_CONF as given: a file's path or KEY=VALUE pairs, read when Spark starts.
    spark_conf: str = ""
    # CUSTODY_FEEDS_STORE: the feed store's URL (file:///path or s3://bucket/prefix); default under the lake.
    feeds_store_url: str = ""
    # Where the ledger's checkpoint file and segments live: places every writer and verifier share.
    ledger_checkpoints_at: Path | None = None
    ledger_segments_at: Path | None = None
    # CUSTODY_LAKE when it names an object store (s3a://bucket/prefix); empty for a folder.
    lake_url: str = ""
    # CUSTODY_S3_ENDPOINT: an S3-compatible store's address when it is not AWS; CUSTODY_S3_REGION.
    s3_endpoint: str = ""
    s3_region: str = ""
    # CUSTODY_S3_TIMEOUT: how long Spark waits for the store to answer one request, in seconds.
    s3_timeout: int = S3_TIMEOUT_SECONDS
    # CUSTODY_S3_READ_ROLE: the role whose credentials the Iceberg catalog vends to engines that do not
    # sign requests, limited to one table's files; `{domain}` and `{name}` stand for the table's asset.
    s3_read_role: str = ""
    # CUSTODY_VENDED_SECONDS: how long vended credentials last; CUSTODY_STS_ENDPOINT: STS's address.
    vended_seconds: int = VENDED_SECONDS[0]
    sts_endpoint: str = ""
    # iceberg: each committed version is also a snapshot of its asset's Iceberg table; off: not.
    tables: str = "iceberg"
    # Dagster's own DAGSTER_HOME, when a deployment points its webserver and daemon elsewhere.
    dagster_home_at: Path | None = None
    # The JDBC driver's jar Spark loads for database sources; None: Debian's, where it is installed.
    jdbc_driver_at: Path | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        home = home_of(env)
        lake_url = object_store_url(env.get("CUSTODY_LAKE") or "")
        return cls(
            home=home,
            lake=home / "lake" if lake_url or not env.get("CUSTODY_LAKE") else posix_path(env["CUSTODY_LAKE"], LAKE),
            lake_url=lake_url,
            s3_endpoint=env.get("CUSTODY_S3_ENDPOINT") or "",
            s3_region=env.get("CUSTODY_S3_REGION") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "",
            s3_timeout=env_count(env, "CUSTODY_S3_TIMEOUT", "seconds") or S3_TIMEOUT_SECONDS,
            s3_read_role=env.get("CUSTODY_S3_READ_ROLE") or "",
            vended_seconds=_vended_seconds(env),
            sts_endpoint=env.get("CUSTODY_STS_ENDPOINT") or env.get("CUSTODY_S3_ENDPOINT") or "",
            catalog_url=env.get("CUSTODY_CATALOG_URL") or f"sqlite:///{home / 'catalog.db'}",
            specs=Path(env.get("CUSTODY_SPECS") or "assets/specs").absolute(),
            spark_master=env.get("CUSTODY_SPARK_MASTER") or "local[2]",
            directory=env.get("CUSTODY_DIRECTORY") or "file:assets/directory.yaml",
            admin_group=env.get("CUSTODY_ADMIN_GROUP") or "custody-admins",
            openlineage=env.get("CUSTODY_OPENLINEAGE") or "file",
            column_lineage=env.get("CUSTODY_COLUMN_LINEAGE") or "on",
            column_lineage_cap=env.get("CUSTODY_COLUMN_LINEAGE_CAP") or None,
            require_verified=env.get("CUSTODY_REQUIRE_VERIFIED", "restricted"),
            auditor_group=env.get("CUSTODY_AUDITOR_GROUP") or "auditors",
            lineage_group=env.get("CUSTODY_LINEAGE_GROUP") or "lineage-reporters",
            ldap_base_dn=env.get("CUSTODY_LDAP_BASE_DN") or "",
            ldap_ca_file=env.get("CUSTODY_LDAP_CA_FILE") or "",
            ldap_starttls=env.get("CUSTODY_LDAP_STARTTLS") or "on",
            specs_approval=env.get("CUSTODY_SPECS_APPROVAL") or "on",
            os_users=env.get("CUSTODY_OS_USERS") or "",
            explicit=_explicit(env),
            dropzone_sensor=_on_off(env, "CUSTODY_DROPZONE_SENSOR", default=True),
            dropzone_sensor_seconds=env_count(env, "CUSTODY_DROPZONE_SENSOR_SECONDS", "seconds")
            or DROPZONE_SENSOR_SECONDS,
            automation_seconds=env_count(env, "CUSTODY_AUTOMATION_SECONDS", "seconds") or AUTOMATION_SECONDS,
            transform_packages=_packages(env, "CUSTODY_TRANSFORM_PACKAGES") or DEFAULT_TRANSFORM_PACKAGES,
            spark_conf=env.get("CUSTODY_SPARK_CONF") or "",
            feeds_store_url=env.get("CUSTODY_FEEDS_STORE") or "",
            ledger_checkpoints_at=_folder(env, "CUSTODY_LEDGER_CHECKPOINTS"),
            ledger_segments_at=_folder(env, "CUSTODY_LEDGER_SEGMENTS"),
            tables=_choice(env, "CUSTODY_TABLES", ("iceberg", "off")) or "iceberg",
            dagster_home_at=Path(env["DAGSTER_HOME"]).absolute() if env.get("DAGSTER_HOME") else None,
            jdbc_driver_at=Path(env["CUSTODY_JDBC_DRIVER"]).absolute() if env.get("CUSTODY_JDBC_DRIVER") else None,
        )

    @classmethod
    def under(cls, home: Path, specs: Path | None = None) -> Settings:
        """Embedded defaults rooted at `home`: what tests and the demo use."""
        settings = cls.from_env({"CUSTODY_HOME": str(home)})
        return replace(settings, specs=specs.absolute()) if specs else settings

    @property
    def dagster_home(self) -> Path:
        return self.dagster_home_at or self.home / "dagster"

    @property
    def ledger_segments(self) -> Path:
        return self.ledger_segments_at or self.home / "ledger" / "segments"

    @property
    def checkpoint_folder(self) -> Path:
        return self.ledger_checkpoints_at or self.home / "ledger"

    @property
    def feeds_store(self) -> str:
        return self.feeds_store_url or (self.lake / "feeds").as_uri()

    @property
    def feeds_workspace(self) -> Path:
        return self.home / "feeds" / "workspace"

    @property
    def cache_dir(self) -> Path:
        return self.home / "cache"

    def spark_jars(self) -> tuple[str, ...]:
        """The jars Spark starts with: the JDBC driver named by CUSTODY_JDBC_DRIVER, which must
        exist, or else Debian's when it is installed; Spark's Kafka source; with an object-store
        lake, every jar `make setup` fetched (Hadoop's S3A and the AWS SDK's S3 client among them)."""
        fetched = tuple(str(jar) for jar in fetched_jars()) if self.lake_url else kafka_source_jars()
        if self.jdbc_driver_at is None:
            return (*fetched, *((str(DEFAULT_JDBC_DRIVER),) if DEFAULT_JDBC_DRIVER.is_file() else ()))
        if not self.jdbc_driver_at.is_file():
            raise InvalidInput(
                f"CUSTODY_JDBC_DRIVER: {self.jdbc_driver_at} is not a file; name the PostgreSQL JDBC "
                "driver's jar (Debian's libpostgresql-jdbc-java installs /usr/share/java/postgresql.jar)"
            )
        return (*fetched, str(self.jdbc_driver_at))

    def table_jars(self) -> tuple[Path, ...]:
        """The jars a Spark session needs to read the versions' Iceberg tables: Iceberg's runtime,
        SQLite's JDBC driver and the PostgreSQL one named by `spark_jars`."""
        return tuple(dict.fromkeys((*fetched_jars(), *(Path(jar) for jar in self.spark_jars()))))


def kafka_source_jars() -> tuple[str, ...]:
    """Spark's Kafka source and its client, of the jars `make setup` copied: what a streamed asset's
    landing reads its topic with."""
    names = ("spark-sql-kafka-", "spark-token-provider-kafka-", "kafka-clients-", "commons-pool2-")
    return tuple(str(jar) for jar in sorted(SPARK_JARS_FOLDER.glob("*.jar")) if jar.name.startswith(names))


def fetched_jars() -> tuple[Path, ...]:
    """The jars of deploy/spark-jars/pom.xml that `make setup` copied."""
    fetched = tuple(sorted(SPARK_JARS_FOLDER.glob("*.jar")))
    if not any(jar.name.startswith("iceberg-spark-runtime-") for jar in fetched):
        raise EnvironmentProblem(f"Spark's jars are not in {SPARK_JARS_FOLDER}: `make setup` fetches them (with Maven)")
    return fetched


def _folder(env: Mapping[str, str], name: str) -> Path | None:
    return posix_path(env[name], name) if env.get(name) else None


def object_store_url(value: str) -> str:
    """CUSTODY_LAKE as `s3a://bucket/prefix` when it names an S3 bucket (`s3://` is taken as the
    same), else empty: a folder's path, checked by `posix_path`."""
    found = URI.fullmatch(value.strip())
    if found is None or found.group(1).lower() not in OBJECT_STORE_SCHEMES:
        return ""
    bucket, _, prefix = found.group(2).partition("/")
    if "@" in found.group(2):  # not shown: it holds credentials, which may hold a '/'
        raise InvalidInput(
            f"{LAKE}: credentials may not be part of the URI; give s3a://bucket/prefix, and the credentials "
            "in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        )
    if BUCKET.fullmatch(bucket) is None:
        named = shown(bucket) if re.fullmatch(r"[A-Za-z0-9._-]{1,80}", bucket) else "the bucket"
        raise InvalidInput(
            f"{LAKE}: {named} is not an S3 bucket's name (3 to 63 lowercase letters, digits, '.' "
            "and '-'); give s3a://bucket/prefix"
        )
    parts = [part for part in prefix.split("/") if part]
    if any(part in (".", "..") for part in parts):
        raise InvalidInput(f"{LAKE}: the prefix may not hold '.' or '..'; give s3a://bucket/prefix")
    return "/".join([f"s3a://{bucket}", *parts])


def posix_path(value: str, name: str) -> Path:
    """A folder given as a path or a file:// URI. The lake and the ledger's files are renamed into,
    flushed to disk and locked with POSIX calls, so they must be on a file system mounted at the
    same place on every host (and, for the lake, every Spark executor); an object store's URI is
    refused rather than taken for a folder's name."""
    found = URI.fullmatch(value)
    if found is None:
        return Path(value).absolute()
    scheme, rest = found.groups()
    if scheme.lower() == "file":
        if rest.startswith("/"):
            return Path(rest)
        raise InvalidInput(f"{name}: a file URI names an absolute path on this host, as file:///srv/lake")
    # The value is not quoted: a URI may carry credentials.
    lake = ", or an S3 bucket as s3a://bucket/prefix" if name == LAKE else ""
    raise InvalidInput(
        f"{name}: the scheme {shown(scheme)}:// is not supported; give a POSIX path, mounted at the "
        f"same place on every host that uses it{lake} (the README's deployment section says why)"
    )


def _explicit(env: Mapping[str, str]) -> frozenset[str]:
    """The policy settings `env` sets; an empty value counts only for require_verified, where it means none."""
    return frozenset(
        key
        for key, variable in POLICY_VARIABLES.items()
        if env.get(variable) or (key == "require_verified" and variable in env)
    )


def _packages(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    """Comma-separated dotted package names from the variable `name`; empty when it is unset or empty."""
    value = environ.get(name)
    if not value:
        return ()
    packages = tuple(part.strip() for part in value.split(","))
    if not all(is_dotted_name(package) for package in packages):
        raise InvalidInput(
            f"{name}={value!r}: expected package names separated by commas, such as assets.transforms,acme.transforms"
        )
    return packages


def _choice(environ: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str | None:
    value = environ.get(name)
    if not value:
        return None
    if value not in choices:
        raise InvalidInput(f"{name}={shown(value)}: expected {' or '.join(choices)}")
    return value


def _on_off(environ: Mapping[str, str], name: str, *, default: bool) -> bool:
    value = environ.get(name)
    if not value:
        return default
    if value not in ("on", "off"):
        raise InvalidInput(f"{name}={value!r}: expected on or off")
    return value == "on"


def is_dotted_name(name: str) -> bool:
    """`a.b.c`, each part a Python identifier: no empty part, no leading dot (a relative name)."""
    return all(part.isidentifier() for part in name.split("."))


def _vended_seconds(environ: Mapping[str, str]) -> int:
    seconds = env_count(environ, "CUSTODY_VENDED_SECONDS", "seconds") or VENDED_SECONDS[0]
    shortest, longest = VENDED_SECONDS
    if not shortest <= seconds <= longest:
        raise InvalidInput(
            f"CUSTODY_VENDED_SECONDS={seconds}: STS gives credentials for {shortest} to {longest} seconds"
        )
    return seconds


def home_of(environ: Mapping[str, str]) -> Path:
    """CUSTODY_HOME, or the default under the current folder."""
    return Path(environ.get("CUSTODY_HOME") or DEFAULT_HOME).absolute()


def env_amount(environ: Mapping[str, str], name: str, unit: str) -> float | None:
    """A finite amount of `unit`, 0 or more, from the variable `name`; None when it is unset or empty."""
    value = environ.get(name)
    if not value:
        return None
    try:
        amount = float(value)
    except ValueError as err:
        raise InvalidInput(f"{name}={value!r}: expected a number of {unit}, 0 or more") from err
    if not 0 <= amount < float("inf"):
        raise InvalidInput(f"{name}={value!r}: expected a number of {unit}, 0 or more")
    return amount


def env_count(environ: Mapping[str, str], name: str, unit: str) -> int | None:
    """A whole number of `unit`, at least 1, from the variable `name`; None when it is unset or empty."""
    value = environ.get(name)
    if not value:
        return None
    try:
        count = int(value)
    except ValueError as err:
        raise InvalidInput(f"{name}={value!r}: expected a whole number of {unit}, at least 1") from err
    if count < 1:
        raise InvalidInput(f"{name}={value!r}: expected a whole number of {unit}, at least 1")
    return count
