"""`custody settings`: the policy settings pinned in the catalog, and their change by an admin."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer
from rich.table import Table

from governance import render
from governance.cli.common import (
    ByUser,
    JsonOption,
    PasswordStdin,
    emit_json,
    group,
    identify,
    load_settings,
    open_custody,
)
from governance.config import POLICY_VARIABLES
from governance.render import escape

settings_app = group("settings", "The policy settings pinned in the catalog: show them, change one (admins).")


@settings_app.command("show")
def settings_show(as_json: JsonOption = False) -> None:
    """The pinned directory, admin group, auditor group and classifications that need a verified identity.

    They are pinned in the catalog the first time they are used; a process whose CUSTODY_* variable
    says otherwise is refused until it agrees.
    """
    from governance.access.directory import open_directory
    from governance.access.settings import pinned_settings

    custody = open_custody(load_settings())
    pinned = pinned_settings(custody.catalog, custody.settings, lambda setting: open_directory(setting, custody.environ))
    if as_json:
        emit_json({key: asdict(value) for key, value in pinned.pinned.items()})
        return
    table = Table(title="Policy settings pinned in the catalog", title_justify="left")
    table.add_column("setting", no_wrap=True)
    table.add_column("value", overflow="fold")
    table.add_column("set by")
    table.add_column("at (UTC)", no_wrap=True)
    for key, value in pinned.pinned.items():
        table.add_row(key, escape(value.value), f"{escape(value.set_by)} ({value.assurance})", value.set_at[:19].replace("T", " "))
    render.stdout_console().print(table)


@settings_app.command("set")
def settings_set(
    key: Annotated[str, typer.Argument(help=f"One of {', '.join(POLICY_VARIABLES)}.", metavar="KEY")],
    value: Annotated[str, typer.Argument(help="The new value, as its CUSTODY_* variable takes it.", metavar="VALUE")],
    by: ByUser,
    password_stdin: PasswordStdin = False,
    as_json: JsonOption = False,
) -> None:
    """Change a pinned policy setting; needs the admin group, and a verified identity when the directory checks passwords.

    The change is a ledger entry. An admin may not move the directory or the admin group to one in
    which they are no admin. Processes whose CUSTODY_* variable still says the old value are refused
    until it is changed or unset.
    """
    from governance.access.directory import open_directory
    from governance.access.settings import change_setting

    custody = open_custody(load_settings())
    change = change_setting(custody.catalog, custody.policy, identify(custody, by, password_stdin), key, value,
                            lambda setting: open_directory(setting, custody.environ))
    if as_json:
        emit_json(asdict(change))
        return
    render.stdout_console().print(f"{change.key}: {change.before} -> {change.after} (by {change.by})", markup=False)
