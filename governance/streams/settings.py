"""Where Kafka is and how Custody signs in to it, from CUSTODY_KAFKA_*, read when asked for."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from governance.errors import EnvironmentProblem

SCRAM = "SCRAM-SHA-512"
PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
BOOTSTRAP = "CUSTODY_KAFKA_BOOTSTRAP"


@dataclass(frozen=True)
class KafkaSettings:
    """A Kafka cluster and Custody's principal on it: a SCRAM user the cluster counts among its
    super users, which creates topics and sets ACLs and SCRAM credentials. Never a person's."""

    bootstrap: str
    user: str
    password: str = field(repr=False)
    security_protocol: str = "SASL_PLAINTEXT"
    # The SCRAM user Custody's landings read topics as, and its password: a service account of the
    # directory's, allowed to read each governed topic and nothing else.
    lander: str = "svc-custody"
    lander_password: str = field(default="", repr=False)
    # A PEM file of the authorities that sign the brokers' certificates, for SASL_SSL.
    ca_file: str = ""

    @classmethod
    def cluster_from_env(cls, environ: Mapping[str, str] | None = None) -> KafkaSettings:
        """Where the cluster is and how a client reaches it, without Custody's own accounts: what
        a producer's or consumer's client needs beside its own credential."""
        env = os.environ if environ is None else environ
        bootstrap = env.get(BOOTSTRAP) or ""
        if not bootstrap:
            raise EnvironmentProblem(
                f"{BOOTSTRAP} is not set: name the Kafka cluster's brokers (host:port,…); `make kafka` starts one"
            )
        protocol = (env.get("CUSTODY_KAFKA_SECURITY_PROTOCOL") or "SASL_PLAINTEXT").upper()
        if protocol not in PROTOCOLS:
            raise EnvironmentProblem(f"CUSTODY_KAFKA_SECURITY_PROTOCOL: give one of {', '.join(PROTOCOLS)}")
        return cls(bootstrap, "", "", protocol, ca_file=env.get("CUSTODY_KAFKA_CA_FILE") or "")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> KafkaSettings:
        env = os.environ if environ is None else environ
        cluster = cls.cluster_from_env(env)
        user, password = env.get("CUSTODY_KAFKA_USER") or "", env.get("CUSTODY_KAFKA_PASSWORD") or ""
        if not user or not password:
            raise EnvironmentProblem(
                "CUSTODY_KAFKA_USER and CUSTODY_KAFKA_PASSWORD name Custody's SCRAM user on the Kafka cluster: set both"
            )
        lander, lander_password = (
            env.get("CUSTODY_KAFKA_LANDER") or "svc-custody",
            env.get("CUSTODY_KAFKA_LANDER_PASSWORD") or "",
        )
        if not lander_password:
            raise EnvironmentProblem(
                f"CUSTODY_KAFKA_LANDER_PASSWORD is not set: the password Custody gives {lander}, "
                "the account its landings read topics as (CUSTODY_KAFKA_LANDER)"
            )
        return replace(cluster, user=user, password=password, lander=lander, lander_password=lander_password)

    def client_config(self, user: str | None = None, password: str | None = None) -> dict[str, str]:
        """librdkafka's settings for a client signed in as `user` (Custody's own by default)."""
        config = {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": self.security_protocol,
            "sasl.mechanism": SCRAM,
            "sasl.username": self.user if user is None else user,
            "sasl.password": self.password if user is None else password or "",
        }
        if self.ca_file:
            config["ssl.ca.location"] = self.ca_file
        return config

    def spark_options(self, user: str, password: str) -> dict[str, str]:
        """Spark's Kafka source options for a read signed in as `user`."""
        escaped = password.replace("\\", "\\\\").replace('"', '\\"')
        options = {
            "kafka.bootstrap.servers": self.bootstrap,
            "kafka.security.protocol": self.security_protocol,
            "kafka.sasl.mechanism": SCRAM,
            "kafka.sasl.jaas.config": (
                f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" '
                f'password="{escaped}";'
            ),
        }
        if self.ca_file:
            options["kafka.ssl.truststore.type"] = "PEM"
            options["kafka.ssl.truststore.location"] = self.ca_file
        return options
