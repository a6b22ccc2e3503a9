"""In process, the requester is the OS user running the command, as the pinned `os_users` setting maps
it to the directory: verified by the operating system, recorded with its host and process. Naming
anyone else takes their password; without it, every command is refused before it changes anything."""

from __future__ import annotations

import json
import socket

import pytest

from governance.access.policy import Identity
from governance.api import Custody
from governance.batches import mark_ready
from governance.catalog import Catalog
from governance.config import Settings
from governance.errors import AccessDenied
from governance.runs import Assurance, os_user
from governance.zones import Lake
from tests.conftest import drop
from tests.helpers import OTHER_USER, cli, execute, given_to, recorded


@pytest.fixture
def carol_at_the_keyboard(landed, capsys) -> Settings:
    """The products landed, and an admin's setting that maps the OS user running the tests to carol,
    a consumer of the sales assets."""
    assert cli(capsys, "settings", "set", "os_users", f"{os_user()}=carol", "--by", "alice")[0] == 0
    return landed


def test_a_command_naming_nobody_runs_as_the_mapped_os_user_verified_with_its_host_and_process(
    carol_at_the_keyboard, capsys
):
    code, out, err = cli(capsys, "read", "sales/products", "--json")
    assert code == 0, err
    assert json.loads(out)["version"] == "sales/products@1"
    [read] = recorded(action="read")
    assert (read["actor"], read["assurance"], read["details"]["result"]) == ("carol", "verified", "allowed")
    assert (read["details"]["method"], read["details"]["channel"]) == ("os-user", "cli")
    assert read["details"]["origin"].startswith(f"OS user {os_user()} on {socket.gethostname()}, process ")


def test_an_unmapped_os_user_is_the_directory_user_of_the_same_name(landed, capsys):
    code, _, err = cli(capsys, "read", "sales/products")
    assert code == 3 and f"{os_user()} may not read sales/products" in err


def test_the_mapping_is_pinned_from_the_environment_at_first_use(cli_env, capsys, monkeypatch):
    monkeypatch.setenv("CUSTODY_OS_USERS", f" {os_user()} = carol ")
    code, out, _ = cli(capsys, "settings", "show", "--json")
    assert code == 0 and json.loads(out)["settings"]["os_users"]["value"] == f"{os_user()}=carol"


@pytest.mark.parametrize(
    "command",
    [
        ["read", "sales/products", "--as", "bob"],
        ["access", "grant", "consumer", "sales/products", "eve", "--by", "alice"],
        ["access", "revoke", "producer", "sales/products", "bob", "--by", "alice"],
        ["status", "sales/products@1", "critical", "--by", "alice"],
        ["purge", "sales/products@1", "--by", "alice"],
        ["settings", "set", "require_verified", "none", "--by", "alice"],
        ["specs", "apply", "--as", "alice"],
        ["ingest", "sales/clients", "--as", "bob"],
    ],
    ids=lambda command: " ".join(command[:2]),
)
def test_naming_another_user_without_their_password_is_refused_recorded_and_changes_nothing(landed, capsys, command):
    before = cli(capsys, "versions", "sales/products", "--json")[1], cli(capsys, "settings", "show", "--json")[1]
    code, out, err = cli(capsys, *command, password=None)
    named = command[command.index("--as" if "--as" in command else "--by") + 1]
    assert (code, out) == (3, "")
    assert err == (
        f"error: denied: {os_user()} runs this process, which is {os_user()} in the directory: acting as "
        f"{named} needs {named}'s password (--password-stdin or CUSTODY_PASSWORD)\n"
    )
    [refused] = recorded(action="act-as")
    assert (refused["actor"], refused["assurance"], refused["details"]["result"]) == (os_user(), "verified", "denied")
    assert (refused["details"]["as"], refused["details"]["method"]) == (named, "os-user")
    assert recorded()[-1]["action"] == "act-as"  # nothing was decided or done after the refusal
    after = cli(capsys, "versions", "sales/products", "--json")[1], cli(capsys, "settings", "show", "--json")[1]
    assert after == before


def test_the_python_api_asks_as_the_os_user_and_refuses_another_name_without_a_password(carol_at_the_keyboard):
    custody = Custody(Settings.from_env())
    assert custody.identity() == Identity("carol", Assurance.VERIFIED, "os-user", "python", custody.local.origin)
    with pytest.raises(AccessDenied, match="acting as bob needs bob's password"):
        custody.open("sales/products", as_user="bob")
    assert custody.open("sales/products").ref == "sales/products@1"


def test_a_mapping_that_is_not_pairs_of_names_is_refused_naming_the_variable(cli_env, capsys, monkeypatch):
    monkeypatch.setenv("CUSTODY_OS_USERS", "root:alice")
    code, _, err = cli(capsys, "settings", "show")
    assert code == 1 and "CUSTODY_OS_USERS: 'root:alice': use OS_USER=DIRECTORY_USER" in err
    monkeypatch.setenv("CUSTODY_OS_USERS", "root=*)(uid=*")
    code, _, err = cli(capsys, "settings", "show")
    assert code == 1 and "invalid user name '*)(uid=*'" in err


def test_a_catalog_pinned_before_the_mapping_existed_pins_it_empty_whatever_the_environment_says(
    cli_env, capsys, monkeypatch
):
    assert cli(capsys, "settings", "show")[0] == 0
    execute(Catalog.from_url(cli_env.catalog_url), "DELETE FROM policy_setting WHERE key = 'os_users'")
    monkeypatch.setenv("CUSTODY_OS_USERS", f"{os_user()}=alice")
    code, out, _ = cli(capsys, "settings", "show", "--json")
    assert code == 0 and json.loads(out)["settings"]["os_users"]["value"] == ""
    code, _, err = cli(capsys, "read", "sales/products")
    assert code == 3 and f"CUSTODY_OS_USERS={os_user()}=alice disagrees with the os_users pinned" in err


PRODUCTS_CSV = b"product_id,product_name,category,unit_price\nP7,Ink,office,3.25\n"


@pytest.fixture
def bob_at_the_keyboard(landed, capsys) -> Settings:
    """The products landed; the OS user running the tests is bob, a producer, and the OS user nobody
    is alice."""
    mapping = f"{os_user()}=bob,{OTHER_USER}=alice"
    assert cli(capsys, "settings", "set", "os_users", mapping, "--by", "alice")[0] == 0
    return landed


def test_ingesting_a_batch_another_os_user_made_records_the_requester_and_the_batch_s_owner(
    bob_at_the_keyboard, capsys
):
    folder = drop(Lake(bob_at_the_keyboard.lake), "sales/products", "alices", {"products.csv": PRODUCTS_CSV})
    for path in (folder, *folder.iterdir()):
        given_to(path)
    mark_ready(folder)
    code, _, err = cli(capsys, "ingest", "sales/products", "--batch", "alices")
    assert code == 0, err
    for action in ("ingestion.requested", "ingestion.committed"):
        entry = recorded(action=action)[-1]
        assert (entry["actor"], entry["assurance"]) == ("bob", "verified")
        assert (entry["details"]["batch"], entry["details"]["batch_owner"]) == ("alices", "alice")


def test_a_batch_holding_a_file_another_os_user_owns_is_refused_to_whoever_ingests_it(bob_at_the_keyboard, capsys):
    folder = drop(Lake(bob_at_the_keyboard.lake), "sales/products", "b1", {"products.csv": PRODUCTS_CSV})
    given_to(folder / "products.csv")
    mark_ready(folder)
    before = cli(capsys, "versions", "sales/products", "--json")[1]
    code, out, err = cli(capsys, "ingest", "sales/products", "--batch", "b1")
    reason = f"{folder / 'products.csv'} is owned by {OTHER_USER}, not by {os_user()} who owns the batch's folder"
    assert (code, err.splitlines()[-1]) == (1, f"error: sales/products: {reason}"), out
    failed = recorded(action="ingestion.failed")[-1]
    assert (failed["actor"], failed["details"]["error"]) == ("bob", reason)
    assert cli(capsys, "versions", "sales/products", "--json")[1] == before
