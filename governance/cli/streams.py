"""`custody streams`: Kafka topics governed by their assets' roles, and credentials to reach them."""

from __future__ import annotations

import typer

from governance import render
from governance.cli.common import (
    AsUser,
    JsonOption,
    PasswordStdin,
    emit_json,
    group,
    identify,
    load_settings,
    open_custody,
)

streams_app = group("streams", "Kafka topics whose ACLs follow their assets' roles; your credential to reach them.")


@streams_app.command("credentials")
def streams_credentials(
    as_user: AsUser = None, password_stdin: PasswordStdin = False, as_json: JsonOption = False
) -> None:
    """A new SCRAM-SHA-512 password for your own principal on the Kafka cluster (User:<you>), shown
    once; the previous one stops working. What you may then do on each topic follows your roles:
    producers write, consumers read (with consumer groups named `<topic>-…`)."""
    from governance.streams.broker import KafkaAdmin
    from governance.streams.credentials import issue
    from governance.streams.settings import SCRAM, KafkaSettings

    custody = open_custody(load_settings())
    admin = KafkaAdmin(KafkaSettings.from_env())
    identity = identify(custody, as_user, password_stdin)
    password = issue(custody.store, admin, identity)
    answer = {
        "user": identity.user,
        "password": password,
        "bootstrap": admin.settings.bootstrap,
        "security_protocol": admin.settings.security_protocol,
        "sasl_mechanism": SCRAM,
    }
    if as_json:
        emit_json(answer)
        return
    console = render.stdout_console()
    for name, value in answer.items():
        console.print(f"{name}: {value}", markup=False, highlight=False)
    typer.echo("Kept nowhere else: store it as your Kafka client's password now.", err=True)
