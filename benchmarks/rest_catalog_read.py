#!/usr/bin/env python
"""Spark reading a large table whole through Custody's Iceberg REST catalog, each request to the
store signed by the service (remote signing), against the same read with the lake's own keys, in
one Spark application on a lake in moto's S3 server on loopback.

The table is the one benchmarks/ingest.py --s3 builds: its generated CSV (2,200,000 rows, ~490 MB,
cached under benchmarks/.data/) ingested by the governed path into an object-store lake, one
committed version that is also the table's Iceberg snapshot. moto checks every request's signature
against its IAM users, and only the service and the operators' catalog hold the lake user's keys:
Spark's JVM has none in its environment. Two sessions of one SparkContext (one JVM, its executors
and JIT shared) each name their Iceberg catalog `custody`, as each recipe does (Iceberg's JDBC
catalog finds its tables by that name):

  REST+signing  the REST catalog at `custody serve`'s /iceberg, configured as `custody tables conf
                --engine spark` prints it, with carol's token (a consumer of the asset) and remote
                signing asked for; no key: every request to the store is signed by the service,
                which decides it for carol
  own keys      the operators' JDBC catalog on the same catalog database (`custody tables
                spark-conf --jdbc`), with Iceberg's S3 file IO, as the REST catalog's tables use,
                holding the lake's keys, and the same HTTP client

Each read is spark.table(…).write.format("noop"), which reads every column of every row. After an
untimed warm-up of each (a row count checked, and the store's requests counted: moto's recorder),
the reads alternate, their order swapped each run: the median seconds of each, the ratio
REST+signing / own keys (goal: at most 1.10), the requests the service signed for one read and
those it made itself, what the ledger recorded of the reader's reads, and the table's bytes.

    .venv/bin/python -m benchmarks.rest_catalog_read
    .venv/bin/python -m benchmarks.rest_catalog_read --rows 50000 --runs 1   # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

import requests
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.ingest import BUCKET, DATA, KEY, Bench, data_file, s3_settings, spark_session
from benchmarks.service import start_service, token
from governance import ledger
from governance.config import Settings
from governance.lake import CATALOG_NAME
from governance.lake.engines import EngineName, engine_conf
from governance.lake.iceberg import spark_conf
from tests.s3_server import S3Server, running_s3

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

GOAL = 1.10  # REST catalog with remote signing against the lake's own keys, medians
REGION = "us-east-1"
READER = "carol"
# moto lets these first requests through unsigned (the bucket, the lake's user, its policy and
# keys), then checks every request's signature.
SETUP_REQUESTS = 4
EVERYTHING = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})
TABLE = f"{CATALOG_NAME}.{KEY.domain}.{KEY.name}"
PREFIX = f"spark.sql.catalog.{CATALOG_NAME}"
# Spark's requests to the store (Iceberg's S3 file IO), told apart from the service's (Arrow's
# client, reading a table's metadata for each load).
JAVA_SDK = "aws-sdk-java"


def lake_keys(store: S3Server) -> dict[str, str]:
    """The bucket, and the keys of an IAM user allowed everything: the lake's keys."""
    store.client().create_bucket(Bucket=BUCKET)
    iam = store.client("iam")
    iam.create_user(UserName="custody")
    iam.put_user_policy(UserName="custody", PolicyName="everything", PolicyDocument=EVERYTHING)
    created = iam.create_access_key(UserName="custody")["AccessKey"]
    return {
        "AWS_ACCESS_KEY_ID": created["AccessKeyId"],
        "AWS_SECRET_ACCESS_KEY": created["SecretAccessKey"],
        "AWS_DEFAULT_REGION": REGION,
    }


def directory(work: Path) -> Path:
    """The demo's directory, with carol a consumer of the benchmark's asset (ingest.py's roles)."""
    demo = yaml.safe_load((ROOT / "assets" / "directory.yaml").read_text(encoding="utf-8"))
    demo["groups"]["bench-consumers"] = [READER]
    path = work / "directory.yaml"
    path.write_text(yaml.safe_dump(demo), encoding="utf-8")
    return path


def service_environ(settings: Settings, endpoint: str) -> dict[str, str]:
    return {
        **os.environ,
        "CUSTODY_HOME": str(settings.home),
        "CUSTODY_SPECS": str(settings.home / "specs"),
        "CUSTODY_DIRECTORY": f"file:{directory(settings.home)}",
        "CUSTODY_LAKE": settings.lake_url,
        "CUSTODY_S3_ENDPOINT": endpoint,
        "CUSTODY_S3_REGION": REGION,
        "CUSTODY_SPECS_APPROVAL": "off",
        "CUSTODY_LOGIN_DELAY_SECONDS": "0.01",
    }


def rest_conf(url: str, bearer: str) -> dict[str, str]:
    """What `custody tables conf --engine spark --with-token` prints, jars aside (the session has them)."""
    lines = engine_conf(EngineName.SPARK, url, bearer)
    return dict(line.split(" ", 1) for line in lines if not line.startswith(("#", "spark.jars ")))


def own_conf(settings: Settings, warehouse: str, keys: dict[str, str], http_client: str) -> dict[str, str]:
    """The operators' JDBC catalog, reading the store with Iceberg's S3 file IO, as the REST
    catalog's tables do, and the lake's keys."""
    operators = spark_conf(settings.catalog_url, warehouse, ())
    del operators["spark.jars"]  # the context started with them
    return operators | {
        f"{PREFIX}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        f"{PREFIX}.s3.access-key-id": keys["AWS_ACCESS_KEY_ID"],
        f"{PREFIX}.s3.secret-access-key": keys["AWS_SECRET_ACCESS_KEY"],
        f"{PREFIX}.s3.endpoint": settings.s3_endpoint,
        f"{PREFIX}.s3.path-style-access": "true",
        f"{PREFIX}.client.region": REGION,
        f"{PREFIX}.http-client.type": http_client,
    }


def session_with(spark: SparkSession, conf: dict[str, str]) -> SparkSession:
    """A session of the same SparkContext with `conf`, which no other session sees."""
    session = spark.newSession()
    for key, value in conf.items():
        session.conf.set(key, value)
    return session


def read_whole(session: SparkSession) -> float:
    started = time.perf_counter()
    session.table(TABLE).write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def recorder(store: S3Server, action: str) -> None:
    requests.post(f"{store.endpoint}/moto-api/recorder/{action}-recording", timeout=30).raise_for_status()


def store_requests(recording: Path) -> Counter[str]:
    """The requests made to the store since the recording was reset, by Spark and by the service."""
    if not recording.exists():
        return Counter()
    with recording.open(encoding="utf-8") as lines:
        agents = [json.loads(line)["headers"].get("User-Agent", "") for line in lines]
    return Counter("spark" if JAVA_SDK in agent else "service" for agent in agents)


def warm_up(store: S3Server, recording: Path, sessions: dict[str, SparkSession], rows: int) -> dict[str, Counter[str]]:
    """The table read whole once by each path, its rows counted, and the store's requests of that read."""
    made = {}
    for path, session in sessions.items():
        found = session.table(TABLE).count()
        if found != rows:
            raise SystemExit(f"{path}: {TABLE} has {found} rows; expected {rows}")
        recorder(store, "reset")
        recorder(store, "start")
        seconds = read_whole(session)
        recorder(store, "stop")
        made[path] = store_requests(recording)
        print(f"warm-up {path:<13} {seconds:6.2f}s  (requests to the store: {dict(made[path])})", flush=True)
    return made


def timed_runs(sessions: dict[str, SparkSession], runs: int) -> dict[str, list[float]]:
    seconds: dict[str, list[float]] = {path: [] for path in sessions}
    order = list(sessions)
    for run in range(runs):
        for path in order if run % 2 == 0 else order[::-1]:
            seconds[path].append(read_whole(sessions[path]))
            print(f"run {run + 1} {path:<13} {seconds[path][-1]:6.2f}s  (load {os.getloadavg()[0]:.1f})", flush=True)
    return seconds


def recorded_reads(bench: Bench) -> Counter[str]:
    """The reader's reads the ledger recorded: table loads, and versions read by how the service
    learnt of them (once per load: Spark's scan report comes before the files' signed requests)."""
    with bench.catalog.reading() as session:
        found = ledger.entries(session, ledger.LedgerFilter.asked(actor=READER, action="read"))
    return Counter(json.loads(entry.details).get("via", "load") for entry in found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_200_000, help="rows in the generated CSV")
    parser.add_argument("--runs", type=int, default=3, help="timed reads through each catalog")
    args = parser.parse_args()
    csv = data_file(args.rows)
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rest-read-", dir=DATA)))
        recording = work / "store-requests.jsonl"
        store = stack.enter_context(
            running_s3({"INITIAL_NO_AUTH_ACTION_COUNT": str(SETUP_REQUESTS), "MOTO_RECORDER_FILEPATH": str(recording)})
        )
        keys = lake_keys(store)
        settings = s3_settings(work, store.endpoint)
        # Started before the keys are in this process's environment: the JVM inherits none, so
        # nothing but the service's signature lets the REST catalog's requests through.
        spark = spark_session("local[2]", settings)
        stack.callback(spark.stop)
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()
        hadoop.set("fs.s3a.access.key", keys["AWS_ACCESS_KEY_ID"])  # the ingestion's writes, through S3A
        hadoop.set("fs.s3a.secret.key", keys["AWS_SECRET_ACCESS_KEY"])
        os.environ.update(keys)  # the lake's client in this process, and the service's
        bench = Bench(spark, work, settings)
        print(f"ingesting {csv.name} into {settings.lake_url} …", flush=True)
        ingested = bench.governed(csv, args.rows)[0]
        print(f"{bench.last.ref} committed in {ingested:.1f}s, {bench.last.bytes / 1e6:.0f} MB of Parquet", flush=True)
        server, api = start_service(service_environ(settings, store.endpoint))
        try:
            bearer = token(api, READER)["Authorization"].removeprefix("Bearer ")
            rest = rest_conf(api.removesuffix("/api/v1"), bearer)
            own = own_conf(settings, bench.snapshots.tables.warehouse, keys, rest[f"{PREFIX}.http-client.type"])
            sessions = {"own keys": session_with(spark, own), "REST+signing": session_with(spark, rest)}
            made = warm_up(store, recording, sessions, args.rows)
            seconds = timed_runs(sessions, args.runs)
        finally:
            server.terminate()
            server.wait(timeout=30)
        summary(args, bench, seconds, made, recorded_reads(bench))


def summary(
    args: argparse.Namespace,
    bench: Bench,
    seconds: dict[str, list[float]],
    made: dict[str, Counter[str]],
    recorded: Counter[str],
) -> None:
    median = {path: statistics.median(times) for path, times in seconds.items()}
    megabytes = bench.last.bytes / 1e6
    print(
        f"\ntable {bench.last.ref}: {args.rows:,} rows, {megabytes:.0f} MB of Parquet on moto's S3 (loopback); "
        f"local[2], {args.runs} runs each"
    )
    width = max(16, 7 * args.runs + 2)
    print(f"{'path':<14}{'s per run':<{width}}{'median s':>9}{'MB/s':>8}{'Spark requests':>16}")
    for path, times in seconds.items():
        runs = " ".join(f"{t:6.2f}" for t in times)
        print(f"{path:<14}{runs:<{width}}{median[path]:9.2f}{megabytes / median[path]:8.1f}{made[path]['spark']:16}")
    print(
        f"signed by the service for one read: {made['REST+signing']['spark']} requests (it read the table's "
        f"metadata in {made['REST+signing']['service']} more of its own); recorded for {READER}: {recorded['load']} loads, "
        + ", ".join(f"{count} version reads via {via}" for via, count in recorded.items() if via != "load")
    )
    ratio = median["REST+signing"] / median["own keys"]
    verdict = "MET" if ratio <= GOAL else "MISSED"
    print(f"ratio REST+signing/own keys (median): {ratio:.2f}  goal <= {GOAL}  ({verdict})")


if __name__ == "__main__":
    main()
