"""`custody directory`: the passwords of the file directory."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from governance.cli.common import group, load_settings, open_custody
from governance.errors import InvalidInput

directory_app = group("directory", "The file directory's users: set a password.")


@directory_app.command("set-password")
def directory_set_password(
    user: Annotated[str, typer.Argument(help="The directory user whose password is set.", metavar="USER")],
    by: Annotated[
        str | None,
        typer.Option("--by", help="An admin who sets it (default: USER, changing their own).", metavar="ADMIN"),
    ] = None,
) -> None:
    """Set USER's password in the file directory of this home: only its argon2id hash is kept.

    The new password is asked twice on a terminal, or read from the first line of stdin. The proof is
    the current password of USER, or of the admin named by --by, from CUSTODY_PASSWORD or asked on a
    terminal. A directory that holds no password yet takes its first ones from whoever runs this home."""
    from governance.access.credentials import set_password
    from governance.access.policy import Identity
    from governance.api import PASSWORD_VARIABLE
    from governance.runs import Assurance, os_user

    custody = open_custody(load_settings())
    prover = by or user
    proof = os.environ.get(PASSWORD_VARIABLE)
    terminal = sys.stdin.isatty()
    if proof is None and terminal and custody.policy.directory.verifies_passwords:
        proof = typer.prompt(f"{prover}'s current password", hide_input=True)
    if proof is None:
        # Without proof: a name given is only asserted; no name is whoever runs the home.
        identity = Identity.asserted(by) if by else Identity(os_user(), Assurance.SYSTEM)
    else:
        identity = custody.identity(prover, proof)
    if terminal:
        new = typer.prompt(f"{user}'s new password", hide_input=True, confirmation_prompt=True)
    else:
        new = sys.stdin.readline().removesuffix("\n")
        if not new:
            raise InvalidInput("no new password on stdin: pipe it in (one line), or run on a terminal")
    set_password(custody.store, custody.policy, identity, user, new)
    typer.echo(f"{user}'s password is set")
