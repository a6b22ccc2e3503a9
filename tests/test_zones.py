"""Names and paths: nothing built from user input can leave its zone."""

from __future__ import annotations

import pytest

from governance.errors import InvalidName, UnsafePath
from governance.zones import AssetKey, Lake, VersionRef, Zone, publish


@pytest.mark.parametrize("name", ["../x", "a/b", "..\\x", "a\x00b", "x" * 64, "", "Upper", "1abc", "a-b", "é"])
def test_invalid_names_are_refused(name):
    with pytest.raises(InvalidName, match="invalid asset name"):
        AssetKey("sales", name)


def test_a_63_character_name_is_fine():
    assert AssetKey("sales", "a" * 63).name == "a" * 63


@pytest.mark.parametrize("text", ["sales", "sales/clients/x", "sales/../etc", "/clients"])
def test_malformed_asset_keys_are_refused(text):
    with pytest.raises(InvalidName):
        AssetKey.parse(text)


@pytest.mark.parametrize(
    "text", ["sales/clients", "sales/clients@", "sales/clients@0", "sales/clients@x", "sales/clients@-1"]
)
def test_malformed_version_refs_are_refused(text):
    with pytest.raises(InvalidName, match="expected DOMAIN/NAME@N"):
        VersionRef.parse(text)


def test_version_refs_round_trip():
    assert str(VersionRef.parse("sales/clients@12")) == "sales/clients@12"


def test_a_symlinked_zone_folder_pointing_outside_the_lake_is_refused(tmp_path):
    lake = Lake(tmp_path / "lake")
    (tmp_path / "lake" / "landing").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "lake" / "landing" / "sales").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafePath, match="outside"):
        lake.version_dir(Zone.LANDING, AssetKey("sales", "clients"), 1)


def test_publish_never_replaces_an_existing_version(tmp_path):
    source, target = tmp_path / "staged", tmp_path / "v=1"
    source.mkdir()
    target.mkdir()
    (target / "data").write_text("original")
    with pytest.raises(UnsafePath, match="immutable"):
        publish(source, target)
    assert (target / "data").read_text() == "original"
