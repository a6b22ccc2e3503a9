"""A streamed asset's topic is governed by its roles on a real broker: applying the spec creates the
topic with ACLs for the producer and consumer groups' members, the broker itself refuses everyone
else, grants and revokes take effect on the broker at once, and each change is in the ledger."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from governance.streams.broker import Acl, KafkaAdmin
from governance.streams.local import cluster_id
from tests.conftest import DEMO_SPECS, ROOT
from tests.dagster_servers import client, start_service, stop
from tests.helpers import cli, recorded
from tests.kafka_server import consume, kafka_environment, produce_json, settings_of
from tests.ports import free_port

CLICKS = "sales/clicks"
CLICKS_SPEC = """\
description: Clicks on the shop's pages, streamed by its web servers.
roles: {owner: sales-owners, producer: sales-producers, consumer: sales-consumers}
zone: landing
source: {format: kafka, topic: TOPIC, partitions: 2, retention: 7d, land_every: 10s}
"""

# What the broker answers a reader it does not allow: on the group it asks for, or on the topic.
REFUSED = ("GROUP_AUTHORIZATION_FAILED", "TOPIC_AUTHORIZATION_FAILED")


@pytest.fixture
def streamed(cli_env, kafka, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, request) -> Iterator[str]:
    """The demo's specs and sales/clicks, whose topic is the test's own; Custody pointed at the broker."""
    folder = tmp_path / "specs"
    shutil.copytree(DEMO_SPECS, folder)
    topic = f"sales.clicks_{request.node.name.removeprefix('test_')[:40]}"
    (folder / "sales" / "clicks.yaml").write_text(CLICKS_SPEC.replace("TOPIC", topic), encoding="utf-8")
    monkeypatch.setenv("CUSTODY_SPECS", str(folder))
    monkeypatch.setenv("CUSTODY_SPECS_APPROVAL", "on")
    for name, value in kafka_environment(kafka).items():
        monkeypatch.setenv(name, value)
    yield topic
    # The broker outlives the test, its catalog does not: the credentials it issued go with it.
    admin = KafkaAdmin(settings_of(kafka))
    for user in admin.users_with_passwords() - {admin.settings.user, admin.settings.lander}:
        admin.remove_password(user)


def credential(capsys, user: str) -> str:
    """`custody streams credentials --as USER`, the user proving who they are."""
    code, out, err = cli(capsys, "streams", "credentials", "--as", user, "--json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["user"] == user and answer["sasl_mechanism"] == "SCRAM-SHA-512"
    return answer["password"]


def apply_all(capsys) -> None:
    code, _, err = cli(capsys, "specs", "apply", "--as", "alice")
    assert code == 0, err


def test_the_producer_writes_the_consumer_reads_and_the_broker_refuses_anyone_else(streamed, kafka, capsys):
    apply_all(capsys)
    bob, carol, eve = (credential(capsys, user) for user in ("bob", "carol", "eve"))
    records = [{"page": f"/p/{i}", "user": i} for i in range(6)]
    assert produce_json(kafka, "bob", bob, streamed, records) == []
    read = consume(kafka, "carol", carol, streamed, f"{streamed}-carol", len(records))
    assert sorted(json.loads(value)["user"] for value in read) == list(range(6))
    assert set(produce_json(kafka, "eve", eve, streamed, records[:2])) == {"TOPIC_AUTHORIZATION_FAILED"}
    assert consume(kafka, "eve", eve, streamed, f"{streamed}-eve", 1) in REFUSED
    # A consumer, not a producer: carol writes nothing.
    assert set(produce_json(kafka, "carol", carol, streamed, records[:1])) == {"TOPIC_AUTHORIZATION_FAILED"}
    # A group outside the topic's prefix is refused too.
    assert consume(kafka, "carol", carol, streamed, "analytics", 1) == "GROUP_AUTHORIZATION_FAILED"


def test_a_revoked_consumer_is_refused_by_the_broker_at_once_and_a_grant_lets_eve_in(streamed, kafka, capsys):
    apply_all(capsys)
    bob, carol, eve = (credential(capsys, user) for user in ("bob", "carol", "eve"))
    assert produce_json(kafka, "bob", bob, streamed, [{"page": "/"}]) == []
    assert len(consume(kafka, "carol", carol, streamed, f"{streamed}-carol", 1)) == 1

    code, _, err = cli(capsys, "access", "revoke", "consumer", CLICKS, "carol", "--by", "alice")
    assert code == 0, err
    assert consume(kafka, "carol", carol, streamed, f"{streamed}-carol2", 1) in REFUSED
    code, _, err = cli(capsys, "access", "grant", "consumer", CLICKS, "eve", "--by", "alice")
    assert code == 0, err
    assert len(consume(kafka, "eve", eve, streamed, f"{streamed}-eve", 1)) == 1

    removed = [e["details"] for e in recorded(action="stream.acl_removed") if e["details"]["name"].startswith(streamed)]
    assert sorted((d["user"], d["resource"], d["operation"], d["because"]) for d in removed) == [
        ("carol", "group", "read", "revoke consumer carol"),
        ("carol", "topic", "describe", "revoke consumer carol"),
        ("carol", "topic", "read", "revoke consumer carol"),
    ]
    added = [e for e in recorded(action="stream.acl_added") if e["details"]["because"] == "grant consumer eve"]
    assert {e["actor"] for e in added} == {"alice"} and len(added) == 3


def test_applying_records_the_topic_and_each_acl_it_adds(streamed, kafka, capsys):
    apply_all(capsys)
    created = [e for e in recorded(action="stream.topic_created") if e["details"]["topic"] == streamed]
    assert [(e["actor"], e["asset_key"], e["assurance"]) for e in created] == [("alice", CLICKS, "verified")]
    added = {
        (e["details"]["user"], e["details"]["resource"], e["details"]["operation"])
        for e in recorded(action="stream.acl_added")
        if e["details"]["name"].startswith(streamed)
    }
    assert added == {
        ("bob", "topic", "write"),
        ("bob", "topic", "describe"),
        ("carol", "topic", "read"),
        ("carol", "topic", "describe"),
        ("carol", "group", "read"),
        ("svc-custody", "topic", "read"),
        ("svc-custody", "topic", "describe"),
    }
    state = KafkaAdmin(settings_of(kafka)).topic(streamed)
    assert state is not None and (state.partitions, state.retention_ms) == (2, 7 * 86_400_000)


def test_a_topic_that_exists_with_other_acls_is_refused_and_nothing_is_applied(streamed, kafka, capsys):
    admin = KafkaAdmin(settings_of(kafka))
    admin.create_topic(streamed, 1, 3_600_000)
    stranger = AclBinding(
        ResourceType.TOPIC,
        streamed,
        ResourcePatternType.LITERAL,
        "User:eve",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    admin.client.create_acls([stranger])[stranger].result()
    code, _, err = cli(capsys, "specs", "apply", "--as", "alice")
    assert code != 0
    assert f"topic {streamed} exists" in err and "eve: read on topic" in err and "clicks.yaml: source.topic" in err
    assert recorded(action="spec.applied") == []
    assert {acl.user for acl in admin.acls("topic", streamed)} == {"eve"}


def test_a_compacted_topic_is_refused_and_nothing_is_applied(streamed, kafka, capsys):
    admin = KafkaAdmin(settings_of(kafka))
    compact = NewTopic(streamed, num_partitions=2, replication_factor=-1, config={"cleanup.policy": "compact"})
    admin.client.create_topics([compact])[streamed].result()
    code, _, err = cli(capsys, "specs", "apply", "--as", "alice")
    assert code != 0
    assert "clicks.yaml: source.topic" in err and f"topic {streamed}" in err and "is compacted" in err
    assert recorded(action="spec.applied") == []
    assert admin.acls("topic", streamed) == set()


def test_repair_removes_an_acl_nobody_granted_and_says_so(streamed, kafka, capsys):
    apply_all(capsys)
    admin = KafkaAdmin(settings_of(kafka))
    stranger = Acl("eve", "topic", streamed, "literal", "read")
    admin.add_acls([stranger])
    code, out, err = cli(capsys, "repair")
    assert code == 0, err
    assert f"ACL removed: eve: read on topic {streamed}" in out
    assert stranger not in admin.acls("topic", streamed)
    removed = [e for e in recorded(action="stream.acl_removed") if e["details"]["name"] == streamed]
    assert [(e["actor"], e["details"]["user"], e["details"]["because"]) for e in removed] == [
        ("custody-repair", "eve", "repair")
    ]
    code, out, _ = cli(capsys, "repair")
    assert code == 0 and "ACL" not in out
    wider = Acl("eve", "topic", "sales.", "prefixed", "read")
    admin.add_acls([wider])
    try:
        code, out, _ = cli(capsys, "repair")
        assert code == 0 and f"ACL wider than {streamed}, left: eve: read on topic sales.*" in out
        assert wider in admin.acls("topic", streamed)
    finally:
        admin.remove_acls([wider])


def test_repair_ends_the_kafka_access_of_someone_who_left_the_directory(streamed, kafka, cli_env, capsys):
    apply_all(capsys)
    bob = credential(capsys, "bob")
    admin = KafkaAdmin(settings_of(kafka))
    admin.set_password("ops", "an-operators-own")  # no user of the directory's, and not Custody's to remove
    [copy] = (cli_env.home / "directory").glob("*.yaml")
    left = re.sub(r"\n  bob:\n(    .*\n)+", "\n", copy.read_text(encoding="utf-8"))
    copy.write_text(left.replace("sales-producers: [bob]", "sales-producers: []"), encoding="utf-8")
    code, out, err = cli(capsys, "repair")
    assert code == 0, out + err
    assert "Kafka credential removed: bob (no longer in the directory)" in out
    assert {"bob", "ops"} & admin.users_with_passwords() == {"ops"}
    assert {acl.user for acl in admin.acls("topic", streamed)} == {"carol", "svc-custody"}
    with pytest.raises(KafkaException):
        AdminClient({**settings_of(kafka).client_config("bob", bob), "log_level": 0}).list_topics(timeout=5)
    [removed] = recorded(action="stream.credential_removed")
    assert (removed["actor"], removed["details"]["user"], removed["details"]["because"]) == (
        "custody-repair",
        "bob",
        "no longer in the directory",
    )
    code, out, _ = cli(capsys, "repair")
    assert code == 0 and "credential" not in out


def test_an_edit_not_applied_yet_changes_no_acl(streamed, kafka, capsys, tmp_path):
    apply_all(capsys)
    spec = tmp_path / "specs" / "sales" / "clicks.yaml"
    spec.write_text(spec.read_text(encoding="utf-8").replace("consumer: sales-consumers", "consumer: auditors"))
    code, _, err = cli(capsys, "repair")
    assert code == 0, err
    readers = {acl.user for acl in KafkaAdmin(settings_of(kafka)).acls("topic", streamed) if acl.operation == "read"}
    assert readers == {"carol", "svc-custody"}
    apply_all(capsys)
    readers = {acl.user for acl in KafkaAdmin(settings_of(kafka)).acls("topic", streamed) if acl.operation == "read"}
    assert readers == {"dave", "svc-custody"}


def test_a_renamed_topic_keeps_no_one_s_access_and_nor_does_a_retired_asset_s(streamed, kafka, capsys, tmp_path):
    apply_all(capsys)
    admin = KafkaAdmin(settings_of(kafka))
    spec = tmp_path / "specs" / "sales" / "clicks.yaml"
    renamed = f"{streamed}_b"
    spec.write_text(spec.read_text(encoding="utf-8").replace(f"topic: {streamed},", f"topic: {renamed},"))
    apply_all(capsys)
    assert {acl for acl in admin.acls("topic", streamed) if acl.permission == "allow"} == set()
    assert {acl.user for acl in admin.acls("topic", renamed)} == {"bob", "carol", "svc-custody"}
    spec.unlink()
    apply_all(capsys)
    assert admin.acls("topic", renamed) == set() and admin.acls("group", f"{renamed}-") == set()
    let_go = {(e["details"]["name"], e["details"]["because"]) for e in recorded(action="stream.acl_removed")}
    assert {(streamed, "apply"), (renamed, "apply"), (f"{renamed}-", "apply")} <= let_go


def test_a_credential_is_only_for_a_user_who_proves_who_they_are(streamed, kafka, capsys):
    code, _, err = cli(capsys, "streams", "credentials", "--as", "dave", password=None)
    assert code != 0 and "acting as dave needs dave's password" in err
    assert [e["details"]["as"] for e in recorded() if (e["details"] or {}).get("as")] == ["dave"]
    assert "dave" not in KafkaAdmin(settings_of(kafka)).users_with_passwords()
    code, _, err = cli(capsys, "streams", "credentials", "--as", "dave", password="wrong")
    assert code != 0 and "dave" not in KafkaAdmin(settings_of(kafka)).users_with_passwords()


def test_a_credential_custody_did_not_issue_is_never_replaced(streamed, kafka, capsys):
    admin = KafkaAdmin(settings_of(kafka))
    # alice's apply sets the landing account's credential, recorded with her as its actor.
    admin.remove_password(admin.settings.lander)
    apply_all(capsys)
    assert [e["actor"] for e in recorded(action="stream.credential_set")] == ["alice"]
    admin.set_password("alice", "an-operators-own")
    code, _, err = cli(capsys, "streams", "credentials", "--as", "alice")
    assert code != 0 and "alice has a credential on the cluster that Custody did not issue" in err
    assert [e["actor"] for e in recorded(action="stream.credential_refused")] == ["alice"]
    assert [e for e in recorded(action="stream.credential_set") if e["details"]["user"] == "alice"] == []
    assert admin.settings.lander in admin.users_with_passwords()


def test_a_new_credential_ends_the_previous_one_and_no_password_reaches_the_ledger(streamed, kafka, capsys):
    apply_all(capsys)
    first, second = credential(capsys, "carol"), credential(capsys, "carol")
    as_carol = settings_of(kafka).client_config("carol", first)
    # librdkafka says a refused sign-in as a failure to reach the broker, which the next line reaches.
    with pytest.raises(KafkaException):
        AdminClient({**as_carol, "log_level": 0}).list_topics(timeout=5)
    AdminClient({**as_carol, "sasl.password": second}).list_topics(timeout=10)
    issued = [e for e in recorded(action="stream.credential_set") if e["details"]["user"] == "carol"]
    assert [e["actor"] for e in issued] == ["carol", "carol"]
    assert not any(password in json.dumps(e) for e in issued for password in (first, second))


def test_a_client_of_the_service_gets_its_credential_without_any_kafka_secret(
    streamed, kafka, capsys, cli_env, tmp_path
):
    apply_all(capsys)
    server, port = start_service(
        cli_env, {name: value for name, value in os.environ.items() if name.startswith("CUSTODY_")}, ui=False
    )
    try:
        api = f"http://127.0.0.1:{port}/api/v1"
        assert client(api, tmp_path, "login", "bob", "--password-stdin", stdin="bob-demo\n").returncode == 0
        asked = client(api, tmp_path, "streams", "credentials", "--json")
        assert asked.returncode == 0, asked.stderr
        answer = json.loads(asked.stdout)
        assert answer["user"] == "bob" and answer["bootstrap"] == kafka.bootstrap
        assert produce_json(kafka, "bob", answer["password"], streamed, [{"page": "/"}]) == []
        other = client(api, tmp_path, "streams", "credentials", "--as", "carol")
        assert other.returncode != 0 and "--as names carol, but the token" in other.stderr
    finally:
        stop(server)
    [issued] = [e for e in recorded(action="stream.credential_set") if e["details"]["user"] == "bob"]
    assert issued["details"]["channel"] == "api" and issued["assurance"] == "verified"


def test_an_unreachable_cluster_refuses_the_apply_naming_it(streamed, capsys, monkeypatch):
    monkeypatch.setenv("CUSTODY_KAFKA_BOOTSTRAP", "127.0.0.1:1")
    code, _, err = cli(capsys, "specs", "apply", "--as", "alice")
    assert code != 0 and "Kafka at 127.0.0.1:1" in err
    assert recorded(action="spec.applied") == []


def test_fewer_partitions_are_refused_before_anything_changes(streamed, kafka, capsys, tmp_path):
    apply_all(capsys)
    spec = tmp_path / "specs" / "sales" / "clicks.yaml"
    spec.write_text(
        spec.read_text(encoding="utf-8").replace("partitions: 2, retention: 7d", "partitions: 1, retention: 1d")
    )
    code, _, err = cli(capsys, "specs", "apply", "--as", "alice")
    assert code != 0 and f"topic {streamed} has 2 partitions; Kafka cannot take partitions away" in err
    state = KafkaAdmin(settings_of(kafka)).topic(streamed)
    assert state is not None and (state.partitions, state.retention_ms) == (2, 7 * 86_400_000)
    assert len(recorded(action="spec.applied")) == 5  # the first apply's, of the demo's four and clicks


def test_a_streamed_spec_without_a_cluster_is_refused_naming_the_setting(streamed, capsys, monkeypatch):
    monkeypatch.delenv("CUSTODY_KAFKA_BOOTSTRAP")
    code, _, err = cli(capsys, "specs", "apply", "--as", "alice")
    assert code != 0 and "CUSTODY_KAFKA_BOOTSTRAP is not set" in err
    assert recorded(action="spec.applied") == []


def test_two_specs_landing_one_topic_are_refused_at_check(streamed, capsys, tmp_path):
    other = tmp_path / "specs" / "sales" / "clicks_again.yaml"
    other.write_text(CLICKS_SPEC.replace("TOPIC", streamed), encoding="utf-8")
    code, out, err = cli(capsys, "specs", "check")
    assert code != 0
    assert re.search(rf"clicks_again.yaml:4: source.topic: topic {streamed} is landed by sales/clicks\b", out + err)


def test_a_local_broker_s_cluster_id_never_reads_as_an_option_to_kafka_s_tools():
    # One id in 64 would start with '-' if drawn freely.
    assert not any(cluster_id().startswith("-") for _ in range(2000))


def test_make_kafka_s_broker_stops_on_sigterm_as_on_ctrl_c(tmp_path):
    env = {
        **os.environ,
        "CUSTODY_HOME": str(tmp_path / "home"),
        "CUSTODY_KAFKA_USER": "custody",
        "CUSTODY_KAFKA_PASSWORD": secrets.token_urlsafe(12),
    }
    port = free_port()
    command = [sys.executable, "-m", "governance.streams.local", "--port", str(port)]
    command += ["--controller-port", str(free_port())]
    broker = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert broker.stdout is not None
        assert "Kafka listens on" in broker.stdout.readline()
        broker.send_signal(signal.SIGTERM)
        assert broker.wait(timeout=60) == 0
    finally:
        if broker.poll() is None:
            os.killpg(broker.pid, signal.SIGKILL)
            broker.wait()
    # The broker's JVM went with it: its port is free again.
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0
