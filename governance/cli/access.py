"""`custody access`: who may do what to an asset; explain, grant, revoke."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated
from urllib.parse import quote

import typer

from governance import render
from governance.cli.common import (
    AsUser,
    ByUser,
    JsonOption,
    PasswordStdin,
    emit_json,
    group,
    identify,
    load_settings,
    open_custody,
    read_password,
    service_client,
    show,
    spec_of,
)
from governance.zones import AssetKey

access_app = group("access", "Who may do what to an asset: explain, grant, revoke.")


@access_app.command("show")
def access_show(asset: Annotated[str, typer.Argument(help="DOMAIN/NAME")], as_json: JsonOption = False) -> None:
    """Each role on the asset: its group, its members (through nested groups too), what it may do."""
    from governance.access.views import AccessView

    key = AssetKey.parse(asset)
    remote = service_client()
    if remote is not None:
        view = AccessView.from_dict(remote.get(f"/access/{key}"))
    else:
        from governance.access.grants import show as access_view

        custody = open_custody(load_settings())
        view = access_view(custody.policy, spec_of(custody, key))
    show(asdict(view), as_json, lambda: render.access_table(view))


@access_app.command("check")
def access_check(
    asset: Annotated[str, typer.Argument(help="DOMAIN/NAME")],
    as_user: AsUser = None,
    password_stdin: PasswordStdin = False,
    as_json: JsonOption = False,
) -> None:
    """What USER may do to the asset, and why. Nothing is changed, and no decision recorded (a password check is).

    Another user's rights are explained as a name given without proof has them, unless their
    password comes with --password-stdin."""
    key = AssetKey.parse(asset)
    remote = service_client()
    if remote is not None:
        data = remote.get(f"/access/{key}/explain", {"user": as_user})
    else:
        from governance.access.grants import explained
        from governance.access.policy import Identity

        custody = open_custody(load_settings())
        spec = spec_of(custody, key)
        password = read_password(password_stdin)
        if password is None and as_user is not None and as_user != custody.local.user:
            # Not CUSTODY_PASSWORD, which is the caller's own more often than the user's explained.
            identity = Identity.asserted(as_user)
        else:
            identity = custody.identity(as_user, password)
        data = explained(custody.policy, spec, identity)
    show(data, as_json, lambda: render.decisions_table(data))


def _change_role(
    verb: str, role: str, asset: str, user: str, by: str | None, password_stdin: bool, as_json: bool
) -> None:
    from governance.access.views import MembershipChange

    key = AssetKey.parse(asset)
    remote = service_client()
    if remote is not None:
        remote.acting_as(by, "--by")
        path = f"/access/{key}/{role}"
        if verb == "grant":
            sent = remote.send("PUT", path, {"user": user})
        else:
            sent = remote.send("DELETE", f"{path}/{quote(user, safe='')}")
        change = MembershipChange.from_dict(sent)
    else:
        from governance.access.grants import change_role, parse_role
        from governance.access.policy import Verb

        custody = open_custody(load_settings())
        change = change_role(
            custody.store,
            custody.policy,
            identify(custody, by, password_stdin),
            Verb(verb),
            parse_role(role),
            spec_of(custody, key),
            user,
            custody.specs,
        )
    if as_json:
        emit_json(asdict(change))
        return
    console = render.stdout_console()
    for line in render.membership_lines(change):
        console.print(line, markup=False)


RoleArgument = Annotated[str, typer.Argument(help="owner, producer or consumer", metavar="ROLE")]
UserArgument = Annotated[str, typer.Argument(help="The user who gets or loses the role.", metavar="USER")]


@access_app.command("grant")
def access_grant(
    role: RoleArgument,
    asset: Annotated[str, typer.Argument(help="DOMAIN/NAME")],
    user: UserArgument,
    by: ByUser = None,
    password_stdin: PasswordStdin = False,
    as_json: JsonOption = False,
) -> None:
    """Give USER a role on the asset: add them to the role's group in the directory. Needs the owner role."""
    _change_role("grant", role, asset, user, by, password_stdin, as_json)


@access_app.command("revoke")
def access_revoke(
    role: RoleArgument,
    asset: Annotated[str, typer.Argument(help="DOMAIN/NAME")],
    user: UserArgument,
    by: ByUser = None,
    password_stdin: PasswordStdin = False,
    as_json: JsonOption = False,
) -> None:
    """Take a role away: remove USER from the role's group in the directory. Needs the owner role."""
    _change_role("revoke", role, asset, user, by, password_stdin, as_json)
