"""A single-node Apache Kafka broker on loopback, for the demo and for trying Custody: KRaft (no
ZooKeeper), clients authenticated by SASL/SCRAM-SHA-512, and Kafka's StandardAuthorizer, which
denies whatever no ACL allows. Its jars are those `make setup` copies from Maven Central
(deploy/kafka/pom.xml).

Custody's own principal (CUSTODY_KAFKA_USER) is the broker's one super user besides the controller:
it creates topics, sets ACLs and SCRAM credentials. People and service accounts get credentials of
their own from Custody (`custody streams credentials`)."""

from __future__ import annotations

import base64
import os
import secrets
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from governance.errors import EnvironmentProblem
from governance.streams.settings import SCRAM

KAFKA_JARS_FOLDER = Path(sys.prefix) / "share" / "custody" / "kafka-jars"
CONTROLLER_USER = "controller"
MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
STARTUP_SECONDS = 60
# The broker's Java heap: a demo's topics, not a production cluster's.
HEAP = ("-Xms128m", "-Xmx512m")


@dataclass(frozen=True)
class LocalBroker:
    """Where a local broker keeps its data and which loopback ports it listens on."""

    folder: Path
    port: int
    controller_port: int
    admin_user: str
    admin_password: str = field(repr=False)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def environment(self) -> dict[str, str]:
        """How Custody's own clients reach this broker, as CUSTODY_KAFKA_* say it."""
        return {
            "CUSTODY_KAFKA_BOOTSTRAP": self.bootstrap,
            "CUSTODY_KAFKA_USER": self.admin_user,
            "CUSTODY_KAFKA_PASSWORD": self.admin_password,
        }

    @property
    def log(self) -> Path:
        return self.folder / "logs" / "server.log"


def kafka_classpath() -> str:
    """The broker's jars, which `make setup` copies; missing, the one command that fetches them."""
    jars = sorted(KAFKA_JARS_FOLDER.glob("*.jar"))
    if not any(jar.name.startswith("kafka_2.13-") for jar in jars):
        raise EnvironmentProblem(f"Kafka's jars are not in {KAFKA_JARS_FOLDER}: `make setup` fetches them (with Maven)")
    return os.pathsep.join(str(jar) for jar in jars)


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else "java"


def _jaas(module: str, user: str, password: str, *, listed: bool = False) -> str:
    # JAAS quotes values in double quotes; the secrets here are generated or checked to hold none.
    extra = f' user_{user}="{password}"' if listed else ""
    return f'{module} required username="{user}" password="{password}"{extra};'


def server_properties(broker: LocalBroker, controller_secret: str) -> str:
    """The broker's settings: one node, both roles, loopback only, SCRAM for clients, PLAIN for its
    own controller link (a SCRAM credential lives in the metadata the controller serves), every
    request authorized by ACLs, and no topic created by a client's mention of it."""
    data = broker.folder / "data"
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule"
    plain = "org.apache.kafka.common.security.plain.PlainLoginModule"
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{broker.controller_port}",
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{broker.port},CONTROLLER://127.0.0.1:{broker.controller_port}",
        "advertised.listeners": f"SASL_PLAINTEXT://127.0.0.1:{broker.port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": SCRAM,
        "sasl.mechanism.inter.broker.protocol": SCRAM,
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": _jaas(
            scram, broker.admin_user, broker.admin_password
        ),
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": _jaas(
            plain, CONTROLLER_USER, controller_secret, listed=True
        ),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{CONTROLLER_USER};User:{broker.admin_user}",
        "allow.everyone.if.no.acl.found": "false",
        "auto.create.topics.enable": "false",
        "log.dirs": str(data),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # Retention is looked at every 10 s, so that a topic's short retention in a test takes effect.
        "log.retention.check.interval.ms": "10000",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


LOG4J = """\
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = INFO
"""


def _private(path: Path, text: str) -> None:
    """Write `text`, readable by its owner alone: the settings hold the controller's secret and Custody's."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(text)


def cluster_id() -> str:
    """A new cluster id, as Kafka makes one: never starting with '-', which its tools would read
    as an option rather than the value of `-t`."""
    while (made := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
        continue
    return made


def prepare(broker: LocalBroker) -> Path:
    """Write the broker's settings (a new controller secret each start) and, the first time, format
    its storage with Custody's SCRAM credential; return the settings' file."""
    if '"' in broker.admin_password or "\\" in broker.admin_password:
        raise EnvironmentProblem("CUSTODY_KAFKA_PASSWORD: a local broker's password may not hold '\"' or '\\'")
    (broker.folder / "logs").mkdir(parents=True, exist_ok=True)
    os.chmod(broker.folder, 0o700)
    properties = broker.folder / "server.properties"
    _private(properties, server_properties(broker, secrets.token_urlsafe(24)))
    _private(broker.folder / "log4j2.properties", LOG4J.format(log=broker.log))
    if not (broker.folder / "data" / "meta.properties").is_file():
        scram = f"{SCRAM}=[name={broker.admin_user},password={broker.admin_password}]"
        arguments = ["-t", cluster_id(), "-c", str(properties), "--standalone", "--add-scram", scram]
        # In an argument file (the tool's argparse4j reads one argument a line) readable by its owner
        # alone: a command line is every local user's to read.
        argfile = broker.folder / "format.args"
        _private(argfile, "\n".join(arguments))
        command = [_java(), "-cp", kafka_classpath(), *_logging(broker), STORAGE_TOOL, "format", f"@{argfile}"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, check=False)
        finally:
            argfile.unlink(missing_ok=True)
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no message"]
            raise EnvironmentProblem(f"{broker.folder}: Kafka's storage could not be formatted: {detail[0]}")
    return properties


def _logging(broker: LocalBroker) -> list[str]:
    return [f"-Dlog4j2.configurationFile={broker.folder / 'log4j2.properties'}"]


def start(broker: LocalBroker) -> subprocess.Popen[bytes]:
    """The broker's process, started; it listens once `wait_ready` returns."""
    properties = prepare(broker)
    command = [_java(), *HEAP, "-cp", kafka_classpath(), *_logging(broker), MAIN_CLASS, str(properties)]
    with open(broker.folder / "logs" / "console.log", "ab") as console:
        return subprocess.Popen(command, stdout=console, stderr=subprocess.STDOUT, start_new_session=True)


def wait_ready(broker: LocalBroker, process: subprocess.Popen[bytes], seconds: float = STARTUP_SECONDS) -> None:
    """Return once the broker accepts connections; fail naming its log if it stopped or is slow."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise EnvironmentProblem(f"the Kafka broker stopped (exit {process.returncode}): see {broker.log}")
        if _answers(broker.port) and "Kafka Server started" in _tail(broker.log):
            return
        time.sleep(0.2)
    raise EnvironmentProblem(f"the Kafka broker did not start within {seconds:.0f} s: see {broker.log}")


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _tail(path: Path, size: int = 200_000) -> str:
    try:
        with open(path, "rb") as file:
            file.seek(max(0, path.stat().st_size - size))
            return file.read().decode("utf-8", "replace")
    except OSError:
        return ""


def stop(process: subprocess.Popen[bytes], seconds: float = 30) -> None:
    """Stop the broker as Kafka's own script does, by SIGTERM, and wait for it."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def running(broker: LocalBroker) -> Iterator[LocalBroker]:
    """The broker, started and ready, stopped on leaving."""
    process = start(broker)
    try:
        wait_ready(broker, process)
        yield broker
    finally:
        stop(process)


def main(argv: list[str] | None = None) -> int:
    """`make kafka`: a broker under $CUSTODY_HOME/kafka, in the foreground until Ctrl-C."""
    import argparse
    import signal

    from governance.config import home_of

    parser = argparse.ArgumentParser(prog="python -m governance.streams.local", description=main.__doc__)
    parser.add_argument("--port", type=int, default=9092, help="the clients' loopback port (9092)")
    parser.add_argument("--controller-port", type=int, default=9093, help="the controller's loopback port (9093)")
    args = parser.parse_args(argv)
    user, password = os.environ.get("CUSTODY_KAFKA_USER"), os.environ.get("CUSTODY_KAFKA_PASSWORD")
    if not user or not password:
        print("set CUSTODY_KAFKA_USER and CUSTODY_KAFKA_PASSWORD: Custody's principal on the broker", file=sys.stderr)
        return 2
    broker = LocalBroker(home_of(os.environ) / "kafka", args.port, args.controller_port, user, password)
    try:
        process = start(broker)
        wait_ready(broker, process)
    except EnvironmentProblem as err:
        print(err, file=sys.stderr)
        return 1
    print(f"Kafka listens on {broker.bootstrap} (SASL_PLAINTEXT, {SCRAM}); its log: {broker.log}")
    print(f"export CUSTODY_KAFKA_BOOTSTRAP={broker.bootstrap} CUSTODY_KAFKA_USER={user}")
    # SIGTERM stops it as Ctrl-C does: stopping the broker from the handler itself would wait for it
    # inside the `wait` it interrupted, which holds the lock that waiting takes, and hang.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return process.wait()
    except KeyboardInterrupt:
        stop(process)
        return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
