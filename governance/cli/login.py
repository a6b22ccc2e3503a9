"""`custody login` and `custody logout`: a token of the Custody service (CUSTODY_URL) for the commands
that ask it."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from governance.cli.common import PasswordStdin, app, err_console, read_password, service_client
from governance.errors import InvalidInput

if TYPE_CHECKING:
    from governance.service.client import ServiceClient


@app.command("login")
def login(
    user: Annotated[str, typer.Argument(help="Your directory user.", metavar="USER")],
    password_stdin: PasswordStdin = False,
) -> None:
    """Get a token of the Custody service at CUSTODY_URL, proven by your directory password.

    The password is asked on a terminal, or read from stdin with --password-stdin. The token is kept
    in ~/.config/custody/tokens.json, readable by you only, and lasts CUSTODY_TOKEN_SECONDS (an hour by
    default); the commands that read the catalog, lineage, the ledger and rows then ask the service
    and need none of its credentials."""
    client = _client()
    if client.in_clear:
        err_console.print(
            f"warning: {client.url} is plain HTTP: the password crosses the network unencrypted; use https://"
        )
    password = read_password(password_stdin)
    if password is None:
        if not sys.stdin.isatty():
            raise InvalidInput("no password: give --password-stdin and pipe it in, or run on a terminal")
        password = typer.prompt(f"{user}'s password", hide_input=True)
    answer = client.login(user, password)
    minutes = answer["expires_in"] // 60
    typer.echo(f"logged in to {client.url} as {answer['user']} ({answer['method']}) for {minutes} minutes")


@app.command("logout")
def logout() -> None:
    """End your token at the Custody service at CUSTODY_URL, and forget it."""
    client = _client()
    client.logout()
    typer.echo(f"logged out of {client.url}")


def _client() -> ServiceClient:
    client = service_client()
    if client is None:
        raise InvalidInput(
            "CUSTODY_URL is not set: give the address of the Custody service, such as http://custody.example.com:3000"
        )
    return client
