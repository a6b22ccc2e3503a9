"""A version whose files are gone, all of them or some, is refused by every read that names it, in
one line naming the version and a missing file: never read as empty, or short."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from governance.api import Custody
from governance.config import Settings
from governance.demo import demo_password
from governance.errors import IntegrityError
from governance.zones import Lake
from tests.helpers import cli

PRODUCTS = "sales/products@1"
VERIFY = "custody repair --verify names what is damaged"


def version_folder(settings: Settings) -> Path:
    return Path(settings.lake) / "landing" / "sales" / "products" / "v=1"


def first_file(settings: Settings) -> Path:
    folder = version_folder(settings)
    manifest = Lake(settings.lake).read_manifest(folder)
    assert manifest is not None
    return folder / manifest["files"][0]["path"]


def test_a_version_whose_data_file_is_gone_is_refused_by_custody_read_naming_the_file(landed, capsys):
    gone = first_file(landed)
    gone.unlink()

    code, out, err = cli(capsys, "read", PRODUCTS, "--as", "carol")

    assert (code, out) == (1, "")
    assert err.strip() == f"error: {PRODUCTS} cannot be read: missing {gone}; {VERIFY}"


def test_read_as_json_refuses_it_the_same_way(landed, capsys):
    first_file(landed).unlink()

    code, out, err = cli(capsys, "read", PRODUCTS, "--as", "carol", "--json")

    assert (code, out) == (1, "") and err.startswith(f"error: {PRODUCTS} cannot be read: missing ")


def test_the_python_api_refuses_it_rather_than_return_no_rows(landed):
    first_file(landed).unlink()

    with pytest.raises(IntegrityError, match=f"{PRODUCTS} cannot be read: missing "):
        Custody(landed).read(PRODUCTS, as_user="carol", password=demo_password("carol"))


def test_a_version_whose_folder_is_gone_is_refused_in_one_line(landed, capsys):
    shutil.rmtree(version_folder(landed))

    code, _, err = cli(capsys, "read", PRODUCTS, "--as", "carol")

    assert code == 1
    assert err.strip() == (
        f"error: {PRODUCTS} cannot be read: its manifest in {version_folder(landed)} is missing or unreadable; {VERIFY}"
    )


def test_a_file_cut_short_is_refused_too(landed, capsys):
    damaged = first_file(landed)
    damaged.write_bytes(damaged.read_bytes()[:-10])

    code, _, err = cli(capsys, "read", PRODUCTS, "--as", "carol")

    assert code == 1
    assert err.strip() == f"error: {PRODUCTS} cannot be read: {damaged} is not the size its manifest says; {VERIFY}"


def test_a_manifest_naming_a_file_outside_its_folder_is_refused(landed, capsys):
    manifest = version_folder(landed) / "_manifest.json"
    written = json.loads(manifest.read_text())
    written["files"][0]["path"] = "../../../../directory/users.yaml"
    manifest.write_text(json.dumps(written))

    code, _, err = cli(capsys, "read", PRODUCTS, "--as", "carol")

    assert code == 1
    assert err.strip() == f"error: {PRODUCTS} cannot be read: its manifest names a file outside its folder; {VERIFY}"
