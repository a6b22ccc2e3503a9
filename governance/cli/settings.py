"""`custody settings`: the policy settings pinned in the catalog, and their change by an admin."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated
from urllib.parse import quote

import typer
from rich.table import Table

from governance import render
from governance.cli.common import (
    ByUser,
    JsonOption,
    PasswordStdin,
    emit_json,
    err_console,
    group,
    identify,
    load_settings,
    open_custody,
    service_client,
)
from governance.config import POLICY_VARIABLES
from governance.errors import printable
from governance.render import escape

settings_app = group("settings", "The policy settings pinned in the catalog: show them, change one (admins).")


@settings_app.command("show")
def settings_show(as_json: JsonOption = False) -> None:
    """The pinned directory (and its LDAP base DN, CA and StartTLS), admin group, auditor group and
    classifications that need a verified identity.

    They are pinned in the catalog the first time they are used; a process whose CUSTODY_* variable
    says otherwise is refused until it agrees. This command shows them even then, and says which.
    Through the service (CUSTODY_URL), it says which the service was given otherwise.
    """
    remote = service_client()
    if remote is not None:
        data = remote.get("/settings")
    else:
        from governance.access.settings import pinned_view

        custody = open_custody(load_settings())
        data = pinned_view(custody.store, custody.settings, custody.environ)
    if as_json:
        emit_json(data)
        return
    table = Table(title="Policy settings pinned in the catalog", title_justify="left")
    table.add_column("setting", no_wrap=True)
    table.add_column("value", overflow="fold")
    table.add_column("set by")
    table.add_column("at (UTC)", no_wrap=True)
    for key, value in data["settings"].items():
        table.add_row(
            key,
            escape(value["value"] or "-"),
            f"{escape(value['set_by'])} ({value['assurance']})",
            value["set_at"][:19].replace("T", " "),
        )
    render.stdout_console().print(table)
    where = "the service's environment" if remote is not None else "this environment"
    for found in data["disagreements"]:
        err_console.print(
            printable(
                f"warning: {POLICY_VARIABLES.get(found['key'], found['key'])} says {found['given']}, not the pinned "
                f"{found['pinned']}: commands in {where} are refused"
            ),
            markup=False,
        )


@settings_app.command("set")
def settings_set(
    key: Annotated[str, typer.Argument(help=f"One of {', '.join(POLICY_VARIABLES)}.", metavar="KEY")],
    value: Annotated[str, typer.Argument(help="The new value, as its CUSTODY_* variable takes it.", metavar="VALUE")],
    by: ByUser = None,
    password_stdin: PasswordStdin = False,
    as_json: JsonOption = False,
) -> None:
    """Change a pinned policy setting; needs the admin group, and a verified identity when the directory checks passwords.

    The change is a ledger entry. An admin may not move the directory or the admin group to one in
    which they are no admin. Processes whose CUSTODY_* variable still says the old value are refused
    until it is changed or unset. Through the service (CUSTODY_URL), the directory's settings and
    those the service's environment sets are refused: they are changed on its host.
    """
    remote = service_client()
    if remote is not None:
        remote.acting_as(by, "--by")
        change = remote.send("PUT", f"/settings/{quote(key, safe='')}", {"value": value})
    else:
        from governance.access.settings import change_setting

        custody = open_custody(load_settings())
        done = change_setting(
            custody.store, custody.settings, custody.environ, identify(custody, by, password_stdin), key, value
        )
        change = {**asdict(done), "changed": done.changed}
    if as_json:
        emit_json(change)
        return
    said = (
        f"{change['key']}: {change['before'] or '-'} -> {change['after'] or '-'} (by {change['by']})"
        if change["changed"]
        else f"{change['key']} is {change['after'] or '-'} already: nothing changed"
    )
    render.stdout_console().print(printable(said), markup=False)
