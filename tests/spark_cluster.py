"""A real Spark standalone cluster for tests: a master and two one-core workers on loopback, started
with the pyspark package's own `spark-class`. Without Java the fixture fails; it never skips."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyspark

from governance.runtime import require_java
from tests.ports import free_port
from tests.s3_server import CREDENTIALS

WORKERS = 2
START_SECONDS = 90


@dataclass(frozen=True)
class SparkCluster:
    master: str
    web: str
    logs: Path

    def state(self) -> dict:
        """The master's own account of its workers and applications (its web UI's JSON)."""
        with urllib.request.urlopen(f"{self.web}/json/", timeout=10) as answer:
            return json.load(answer)

    def applications(self) -> list[dict]:
        state = self.state()
        return [*state.get("activeapps", []), *state.get("completedapps", [])]


@contextmanager
def running_cluster() -> Iterator[SparkCluster]:
    """Start the master and the workers; stop them and their executors afterwards."""
    require_java()
    home = Path(pyspark.__file__).parent
    folder = Path(tempfile.mkdtemp(prefix="custody-spark-"))
    port, web_port = free_port(), free_port()
    master = f"spark://127.0.0.1:{port}"
    # The workers start executors with this environment: on PATH a `python3` without the project,
    # as on a fresh host, so only what the driver ships and names can make Python UDFs work.
    # The workers hold the test S3 server's credentials, as an instance role would give them: their
    # executors reach a lake in a bucket without any secret in Spark's settings.
    env = {
        **os.environ,
        **CREDENTIALS,
        "SPARK_HOME": str(home),
        "SPARK_LOG_DIR": str(folder),
        "SPARK_NO_DAEMONIZE": "1",
    }
    env.pop("PYSPARK_PYTHON", None)
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if ".venv" not in p)
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, folder, ignore_errors=True)  # runs last, once every process is stopped
        start = _starter(stack, home, env, folder)
        start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(web_port),
        )
        cluster = SparkCluster(master, f"http://127.0.0.1:{web_port}", folder)
        for number in range(1, WORKERS + 1):
            work = folder / f"worker-{number}"
            work.mkdir()
            start(
                f"worker-{number}",
                "org.apache.spark.deploy.worker.Worker",
                master,
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                str(free_port()),
                "--work-dir",
                str(work),
            )
        _wait_for_workers(cluster)
        yield cluster


def _starter(stack: ExitStack, home: Path, env: dict[str, str], folder: Path):
    def start(name: str, *command: str) -> None:
        with open(folder / f"{name}.log", "wb") as log:  # the process keeps its own descriptor
            process = subprocess.Popen(
                [str(home / "bin" / "spark-class"), *command],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        stack.callback(_stop, process)

    return start


def _stop(process: subprocess.Popen) -> None:
    """The process and everything it started (a worker's executors), by their session."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _wait_for_workers(cluster: SparkCluster) -> None:
    deadline = time.monotonic() + START_SECONDS
    alive = 0
    while time.monotonic() < deadline:
        try:
            alive = sum(1 for worker in cluster.state().get("workers", []) if worker.get("state") == "ALIVE")
        except OSError:
            alive = 0
        if alive == WORKERS:
            return
        time.sleep(0.5)
    logs = "\n".join(
        f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        for log in sorted(cluster.logs.glob("*.log"))
    )
    raise RuntimeError(
        f"the Spark master has {alive} of {WORKERS} workers alive after {START_SECONDS}s; "
        f"the ends of their logs:\n{logs}"
    )
