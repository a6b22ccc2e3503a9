"""Policy settings are pinned in the catalog: the directory, the admin and auditor groups and the
classifications that need a verified identity come from there, change only by an admin's command with a
ledger entry, and a process whose environment says otherwise is refused, with the setting named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import pytest
from sqlalchemy.engine import make_url
from sqlmodel import select

from assets.factory import build_assets
from governance import ledger
from governance.access.guard import authorize
from governance.access.policy import Identity, Verb
from governance.access.settings import SettingDisagrees, change_setting, held_by_the_host, pinned_settings
from governance.api import Custody
from governance.catalog import Catalog
from governance.catalog.models import PolicySetting
from governance.config import Settings
from governance.demo import PRODUCTS, drop_demo_batches
from governance.errors import AccessDenied
from governance.runs import Assurance, os_user
from governance.zones import AssetKey
from resources import CustodyResource, SparkResource
from tests.conftest import ROOT
from tests.helpers import cli, recorded

DEMO_DIRECTORY = ROOT / "assets" / "directory.yaml"
CUSTODY = Path(sys.executable).with_name("custody")
SETPRIV = Path("/usr/bin/setpriv")


def set_by_alice(capsys, monkeypatch, key: str, value: str) -> tuple[int, str, str]:
    """`custody settings set KEY VALUE --by alice`, with the password the demo directory documents for her."""
    with monkeypatch.context() as scoped:
        scoped.setenv("CUSTODY_PASSWORD", "alice-demo")
        return cli(capsys, "settings", "set", key, value, "--by", "alice")


def test_an_admin_who_does_not_prove_who_they_are_may_not_change_a_setting(landed, capsys):
    code, _, err = cli(capsys, "settings", "set", "require_verified", "none", "--by", "alice", password=None)
    assert code == 3 and f"{os_user()} runs this process" in err and "acting as alice needs alice's password" in err
    [denied] = recorded(action="act-as")
    assert (denied["actor"], denied["details"]["as"], denied["details"]["result"]) == (os_user(), "alice", "denied")
    assert denied["details"]["method"] == "os-user" and denied["details"]["channel"] == "cli"
    assert [e for e in recorded(action="settings") if e["action"] == "settings"] == []
    assert json.loads(cli(capsys, "settings", "show", "--json")[1])["settings"]["require_verified"]["value"] == (
        "restricted"
    )


def own_directory(tmp_path: Path, groups: str) -> Path:
    """A directory file of someone's own making: the demo's users, other groups."""
    users = DEMO_DIRECTORY.read_text().split("groups:")[0]
    path = tmp_path / "mine.yaml"
    path.write_text(users + "groups:\n" + "".join(f"  {line}\n" for line in groups.splitlines()))
    return path


def test_the_first_use_pins_the_settings_and_records_it(cli_env, capsys):
    code, out, _ = cli(capsys, "settings", "show", "--json")
    pinned = json.loads(out)["settings"]
    assert code == 0
    assert {key: value["value"] for key, value in pinned.items()} == {
        "directory": f"file:{DEMO_DIRECTORY}",
        "ldap_base_dn": "",
        "ldap_ca_file": "",
        "ldap_starttls": "on",
        "admin_group": "custody-admins",
        "auditor_group": "auditors",
        "lineage_group": "lineage-reporters",
        "require_verified": "restricted",
        "specs_approval": "off",  # as the tests' environment says
        "os_users": "",  # each OS user is the directory user of the same name
    }
    [entry] = recorded(action="settings.pinned")
    assert entry["details"]["settings"]["directory"] == f"file:{DEMO_DIRECTORY}" and entry["assurance"] == "system"


def test_a_directory_of_ones_own_in_the_environment_is_refused_naming_the_setting(
    landed, capsys, monkeypatch, tmp_path
):
    mine = own_directory(tmp_path, "sales-consumers: [eve]\ncustody-admins: [eve]\n")
    monkeypatch.setenv("CUSTODY_DIRECTORY", f"file:{mine}")
    code, out, err = cli(capsys, "read", "sales/products", "--as", "eve")
    assert (code, out) == (3, "")
    assert err.startswith(f"error: CUSTODY_DIRECTORY=file:{mine} disagrees with the directory pinned in the catalog")
    with pytest.raises(SettingDisagrees, match="CUSTODY_DIRECTORY"):
        Custody.from_env().read("sales/products", as_user="eve")
    monkeypatch.delenv("CUSTODY_DIRECTORY")
    refused = recorded(action="settings.refused")
    assert [e["details"]["setting"] for e in refused] == ["directory", "directory"]
    assert refused[0]["details"]["given"] == f"file:{mine}" and recorded(action="read") == []


def test_an_admin_group_of_ones_own_in_the_environment_is_refused(landed, capsys, monkeypatch):
    monkeypatch.setenv("CUSTODY_ADMIN_GROUP", "sales-consumers")
    code, _, err = cli(capsys, "purge", "sales/products@1", "--by", "carol")
    assert code == 3 and "CUSTODY_ADMIN_GROUP=sales-consumers disagrees with the admin_group pinned" in err
    assert Path(landed.lake, "landing/sales/products/v=1").is_dir()


def test_an_environment_that_agrees_with_the_pinned_settings_is_fine(landed, capsys, monkeypatch):
    monkeypatch.setenv("CUSTODY_DIRECTORY", f"file:{Path('assets/directory.yaml')}")
    monkeypatch.setenv("CUSTODY_REQUIRE_VERIFIED", "restricted")
    assert cli(capsys, "read", "sales/products", "--as", "carol")[0] == 0


def test_each_decision_records_which_directory_answered(landed, capsys):
    cli(capsys, "read", "sales/products", "--as", "carol")
    [read] = recorded(action="read")
    assert read["details"]["directory"] == f"file:{DEMO_DIRECTORY}"
    line = cli(capsys, "ledger", "show", "--action", "read", "--as", "dave")[1]
    assert "result=allowed, reason=carol is in sales-consumers" in line  # the answer and why come first


def test_an_admin_changes_a_setting_and_decisions_follow_it(landed, capsys, monkeypatch):
    assert cli(capsys, "read", "sales/products")[0] == 3  # the OS user running the tests holds no role
    code, out, _ = set_by_alice(capsys, monkeypatch, "os_users", f"{os_user()}=carol")
    assert code == 0 and out.strip() == f"os_users: - -> {os_user()}=carol (by alice)"
    code, _, err = cli(capsys, "read", "sales/products")
    assert code == 0, err
    [change] = recorded(action="settings.changed")
    assert change["actor"] == "alice" and change["details"] == {
        "setting": "os_users",
        "from": "",
        "to": f"{os_user()}=carol",
    }


def test_moving_the_directory_moves_every_decision_there(landed, capsys, monkeypatch, tmp_path):
    moved = own_directory(
        tmp_path, "sales-consumers: [eve]\nsales-producers: [bob]\nsales-owners: [alice]\ncustody-admins: [alice]\n"
    )
    assert cli(capsys, "read", "sales/products", "--as", "eve")[0] == 3
    assert set_by_alice(capsys, monkeypatch, "directory", f"file:{moved}")[0] == 0
    code, _, err = cli(capsys, "read", "sales/products", "--as", "eve")
    assert code == 0, err
    assert cli(capsys, "read", "sales/products", "--as", "carol")[0] == 3


def test_a_user_outside_the_admin_group_may_not_change_a_setting(cli_env, capsys):
    code, _, err = cli(capsys, "settings", "set", "admin_group", "sales-consumers", "--by", "carol")
    assert code == 3 and "carol may not change the policy settings: it needs the admin group custody-admins" in err
    [denied] = [e for e in recorded(action="settings") if e["action"] == "settings"]
    assert denied["details"]["result"] == "denied" and denied["details"]["to"] == "sales-consumers"
    assert (
        json.loads(cli(capsys, "settings", "show", "--json")[1])["settings"]["admin_group"]["value"] == "custody-admins"
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [("admin_group", "sales-consumers"), ("directory", "file:{tmp}/mine.yaml")],
)
def test_an_admin_may_not_lock_every_admin_out(cli_env, capsys, monkeypatch, tmp_path, key, value):
    own_directory(tmp_path, "custody-admins: [carol]\n")
    code, _, err = set_by_alice(capsys, monkeypatch, key, value.format(tmp=tmp_path))
    assert code == 3 and "alice is not in the admin group" in err and "could change it back" in err
    assert (
        json.loads(cli(capsys, "settings", "show", "--json")[1])["settings"]["admin_group"]["value"] == "custody-admins"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["settings", "set", "owner", "x", "--by", "alice"],
            "unknown policy setting owner: use one of directory, ldap_base_dn, ldap_ca_file, ldap_starttls, admin_group, auditor_group, lineage_group, require_verified",
        ),
        (["settings", "set", "require_verified", "secret", "--by", "alice"], "unknown classification secret"),
        (["settings", "set", "admin_group", "a b", "--by", "alice"], "invalid group name 'a b'"),
        (["settings", "set", "directory", "http://x", "--by", "alice"], "use file:PATH, ldap://… or ldaps://…"),
    ],
)
def test_a_bad_setting_is_one_line_and_changes_nothing(cli_env, capsys, args, message):
    code, _, err = cli(capsys, *args)
    assert code == 1 and message in err and len(err.strip().splitlines()) == 1


def test_a_run_whose_resource_names_another_directory_is_refused_before_spark(
    settings, catalog, lake, tmp_path, capsys
):
    drop_demo_batches(lake)
    Custody(settings).policy  # noqa: B018  (the first use pins the demo directory)
    mine = own_directory(tmp_path, "sales-producers: [eve]\n")
    custody = CustodyResource(home=str(settings.home), catalog_url=settings.catalog_url, directory=f"file:{mine}")
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            build_assets(Custody(settings).specs),
            resources={"custody": custody, "spark": SparkResource()},
            instance=instance,
            tags={"custody/requested_by": "eve"},
            selection=[dg.AssetKey([PRODUCTS.domain, PRODUCTS.name])],
            raise_on_error=False,
        )
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert (
        "disagrees with the directory pinned in the catalog" in failure.step_failure_data.user_failure_data.description
    )
    assert catalog.versions(PRODUCTS) == []


def test_settings_under_a_fresh_home_take_the_defaults(tmp_path):
    assert Settings.under(tmp_path).explicit == frozenset()
    assert Settings.from_env({"CUSTODY_REQUIRE_VERIFIED": ""}).explicit == {"require_verified"}


def test_a_directory_that_cannot_be_read_is_never_pinned(cli_env, capsys, monkeypatch, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("- not\n- a directory\n")
    monkeypatch.setenv("CUSTODY_DIRECTORY", f"file:{broken}")
    code, _, err = cli(capsys, "settings", "show")
    assert code == 1 and str(broken) in err
    monkeypatch.delenv("CUSTODY_DIRECTORY")
    assert (
        json.loads(cli(capsys, "settings", "show", "--json")[1])["settings"]["directory"]["value"]
        == f"file:{DEMO_DIRECTORY}"
    )


def test_settings_show_shows_the_pinned_values_even_when_the_environment_disagrees(cli_env, capsys, monkeypatch):
    assert cli(capsys, "settings", "show")[0] == 0
    monkeypatch.setenv("CUSTODY_ADMIN_GROUP", "sales-consumers")
    code, out, err = cli(capsys, "settings", "show")
    assert code == 0 and "custody-admins" in out
    assert "warning: CUSTODY_ADMIN_GROUP says sales-consumers, not the pinned custody-admins" in err


def test_setting_a_value_it_has_already_changes_nothing(cli_env, capsys, monkeypatch):
    code, out, _ = set_by_alice(capsys, monkeypatch, "admin_group", "custody-admins")
    assert code == 0 and out.strip() == "admin_group is custody-admins already: nothing changed"
    assert recorded(action="settings.changed") == []


@pytest.mark.both_backends
def test_pinned_settings_read_back_as_they_were_pinned(settings, catalog):
    pinned = pinned_settings(catalog, settings, {})  # the first use pins them
    read_again = pinned_settings(catalog, settings, {})
    assert read_again == pinned
    assert {setting.set_by for setting in read_again.pinned.values()} == {os_user()}
    assert all(setting.set_at.endswith("+00:00") for setting in read_again.pinned.values())  # to the second, in UTC


def test_a_long_lived_custody_decides_under_the_settings_it_read_and_anew_once_an_admin_changes_them(settings):
    custody = Custody(settings)
    products = custody.specs.get(AssetKey.parse("sales/products"))
    carol = Identity.asserted("carol")

    def read(policy, under):
        return authorize(custody.store, policy, carol, Verb.READ, products, settings=under)

    assert custody.deciding(read).allowed  # internal: any identity of a consumer reads it
    alice = Identity("alice", Assurance.VERIFIED, "password", "cli")
    change_setting(custody.store, settings, {}, alice, "require_verified", "internal,restricted")  # as by a command
    with pytest.raises(AccessDenied, match="verified"):
        custody.deciding(read)
    with custody.store.reading() as session:
        reads = [json.loads(e.details)["result"] for e in ledger.entries(session) if e.action == "read"]
    assert reads == ["allowed", "denied"]  # the first try under the old settings left nothing


def test_a_setting_the_service_s_environment_sets_is_held_by_its_host_and_an_admin_s_change_is_refused(settings):
    custody = Custody(settings)
    environ = {"CUSTODY_HOME": str(settings.home), "CUSTODY_AUDITOR_GROUP": "auditors"}
    held = held_by_the_host(Settings.from_env(environ))
    assert held["auditor_group"] == "the service's environment sets CUSTODY_AUDITOR_GROUP"
    assert held["directory"] == "the directory is chosen on the service's host"
    alice = Identity("alice", Assurance.VERIFIED, "password", "api")
    with pytest.raises(AccessDenied, match="alice may not change auditor_group through the service"):
        change_setting(custody.store, settings, {}, alice, "auditor_group", "sales-owners", held=held)
    assert pinned_settings(custody.store, settings, {})["auditor_group"] == "auditors"
    with custody.store.reading() as session:
        [decision] = [json.loads(e.details) for e in ledger.entries(session) if e.action == "settings"]
    assert (decision["result"], decision["to"]) == ("denied", "sales-owners")


def as_another_user(*args: str) -> subprocess.CompletedProcess[str]:
    """`custody ARGS`, its OS user mapped to carol, in a process that file permissions hold as they hold
    another user: under root, without the capabilities that let root pass them (util-linux's setpriv)."""
    unprivileged: list[str] = []
    if os.geteuid() == 0:
        assert SETPRIV.is_file(), "a command run as root without its capabilities needs setpriv (util-linux)"
        unprivileged = [str(SETPRIV), "--inh-caps=-all", "--bounding-set=-all", "--securebits=+noroot,+noroot_locked"]
    return subprocess.run(
        [*unprivileged, str(CUSTODY), *args],
        env={**os.environ, "CUSTODY_OS_USERS": f"{os_user()}=carol"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@contextmanager
def unwritable(*paths: Path) -> Iterator[None]:
    """`paths` read-only while the block runs, as another user's files and folders are: 0444, 0555."""
    modes = {path: path.stat().st_mode for path in paths}
    for path in paths:
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        yield
    finally:
        for path, mode in modes.items():
            path.chmod(mode)


def nothing_pinned(catalog: Catalog) -> bool:
    with catalog.reading() as session:
        return session.exec(select(PolicySetting)).all() == []


def test_a_process_that_may_not_write_the_catalog_is_told_so_in_one_line_when_its_first_use_would_pin(cli_env):
    catalog = Catalog.from_url(cli_env.catalog_url)  # made, with nothing pinned yet
    database = Path(str(make_url(cli_env.catalog_url).database))
    with unwritable(*database.parent.glob(f"{database.name}*")):
        done = as_another_user("settings", "show")
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        (
            "error: the policy settings, which their first use pins in the catalog, could not be written: the "
            f"catalog at {cli_env.catalog_url} cannot be written by this process (attempt to write a readonly database)\n"
        ),
    )
    assert nothing_pinned(catalog)


def test_a_refusal_the_catalog_cannot_record_names_the_setting_refused_and_the_catalog(cli_env, capsys):
    catalog = Catalog.from_url(cli_env.catalog_url)
    assert cli(capsys, "settings", "show")[0] == 0  # pinned, each OS user the directory user of its name
    database = Path(str(make_url(cli_env.catalog_url).database))
    with unwritable(*database.parent.glob(f"{database.name}*")):
        done = as_another_user("read", "sales/products")
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        (
            f"error: the refusal of CUSTODY_OS_USERS={os_user()}=carol, which disagrees with the pinned os_users, "
            f"could not be written: the catalog at {cli_env.catalog_url} cannot be written by this process "
            "(attempt to write a readonly database)\n"
        ),
    )
    with catalog.reading() as session:
        assert [e.action for e in ledger.entries(session) if e.action.startswith("settings")] == ["settings.pinned"]


def test_a_catalog_whose_folder_the_process_may_not_write_is_named_with_the_lock_it_could_not_make(
    cli_env, monkeypatch, tmp_path
):
    folder = tmp_path / "catalog"
    url = f"sqlite:///{folder / 'catalog.db'}"
    monkeypatch.setenv("CUSTODY_CATALOG_URL", url)
    catalog = Catalog.from_url(url)  # made, and held open by this process as a service would hold it
    with unwritable(folder):
        done = as_another_user("settings", "show")
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        (
            "error: the policy settings, which their first use pins in the catalog, could not be written: the "
            f"catalog at {url} cannot be written by this process (its writer lock {folder / 'catalog.db-writer'} "
            "cannot be made: Permission denied)\n"
        ),
    )
    assert nothing_pinned(catalog)


def test_a_home_the_process_may_not_write_is_named_when_its_copy_of_the_file_directory_cannot_be_made(cli_env):
    catalog = Catalog.from_url(cli_env.catalog_url)
    with unwritable(cli_env.home):
        done = as_another_user("settings", "show")
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        (
            f"error: {cli_env.home / 'directory'}: this process may not write the home's copy of the file "
            f"directory {DEMO_DIRECTORY} (Permission denied)\n"
        ),
    )
    assert nothing_pinned(catalog)
