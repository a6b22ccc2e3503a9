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
    service_client,
)

streams_app = group("streams", "Kafka topics whose ACLs follow their assets' roles; your credential to reach them.")


@streams_app.command("credentials")
def streams_credentials(
    as_user: AsUser = None, password_stdin: PasswordStdin = False, as_json: JsonOption = False
) -> None:
    """A new SCRAM-SHA-512 password for your own principal on the Kafka cluster (User:<you>), shown
    once; the previous one stops working. What you may then do on each topic follows your roles:
    producers write, consumers read (with consumer groups named `<topic>-…`)."""
    remote = service_client()
    if remote is not None:
        remote.acting_as(as_user, "--as")
        answer = remote.send("POST", "/streams/credentials", {})
    else:
        from governance.streams.broker import KafkaAdmin
        from governance.streams.credentials import issued
        from governance.streams.settings import KafkaSettings

        custody = open_custody(load_settings())
        admin = KafkaAdmin(KafkaSettings.from_env())
        answer = issued(custody.store, admin, identify(custody, as_user, password_stdin))
    if as_json:
        emit_json(answer)
        return
    console = render.stdout_console()
    for name, value in answer.items():
        console.print(f"{name}: {value}", markup=False, highlight=False)
    typer.echo("Kept nowhere else: store it as your Kafka client's password now.", err=True)
