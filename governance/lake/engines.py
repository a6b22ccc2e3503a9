"""What each engine needs to read the lake through the Custody service's Iceberg REST catalog: the
catalog's address and the user's token, and no database address or lake key."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path

from governance.lake import CATALOG_NAME

# Where the service serves the catalog, under its address.
ICEBERG_PATH = "/iceberg"
# What stands for the token when it is not printed.
TOKEN_PLACEHOLDER = "<your token: `custody tables conf --with-token` prints it>"
# The jars Spark needs for the REST catalog: Iceberg's runtime, and the AWS SDK its S3 file IO and
# remote signer use; not the JDBC drivers or Hadoop's S3A, which only the operators' recipe needs.
OPERATORS_ONLY = ("hadoop-aws-", "sqlite-jdbc-", "postgresql-")
# How an engine tells the catalog whether it signs its requests of the store or takes credentials.
DELEGATION = "X-Iceberg-Access-Delegation"


class EngineName(StrEnum):
    SPARK = "spark"
    PYICEBERG = "pyiceberg"
    DUCKDB = "duckdb"


def catalog_uri(service_url: str) -> str:
    return service_url.rstrip("/") + ICEBERG_PATH


def engine_conf(engine: EngineName, service_url: str, token: str | None, jars: Sequence[Path] = ()) -> list[str]:
    """The lines to give `engine`, for a user whose token is `token` (a placeholder if None)."""
    uri = catalog_uri(service_url)
    shown = token or TOKEN_PLACEHOLDER
    if engine is EngineName.SPARK:
        prefix = f"spark.sql.catalog.{CATALOG_NAME}"
        lines = [
            f"spark.jars {','.join(str(jar) for jar in jars if not jar.name.startswith(OPERATORS_ONLY))}",
            f"{prefix} org.apache.iceberg.spark.SparkCatalog",
            f"{prefix}.type rest",
            f"{prefix}.uri {uri}",
            # Each statement loads the table as it is now: a purged version or a revoked role
            # counts from the next statement, not after Spark's 30 s cache.
            f"{prefix}.cache-enabled false",
            # Iceberg 1.12's default HTTP client for S3 is the AWS SDK's Apache 5 one, which the SDK
            # release beside Hadoop's S3A lacks.
            f"{prefix}.http-client.type urlconnection",
            # Spark signs its requests of the store: the catalog then knows which version it read.
            f"{prefix}.header.{DELEGATION} remote-signing",
        ]
        return [*lines, f"{prefix}.token {token}" if token else f"# {prefix}.token {shown}"]
    if engine is EngineName.PYICEBERG:
        return [
            "# ~/.pyiceberg.yaml; then pyiceberg.catalog.load_catalog('custody')",
            "catalog:",
            f"  {CATALOG_NAME}:",
            "    type: rest",
            f"    uri: {uri}",
            f"    token: {shown}",
            f"    header.{DELEGATION}: remote-signing",
        ]
    return [
        f"CREATE SECRET {CATALOG_NAME}_token (TYPE iceberg, TOKEN '{shown}');",
        f"ATTACH '{CATALOG_NAME}' AS {CATALOG_NAME} (TYPE iceberg, SECRET {CATALOG_NAME}_token, ENDPOINT '{uri}');",
    ]
