"""`repair` removes what no committed version owns; the quick form only looks where attempts died."""

from __future__ import annotations

from governance.repair import repair
from governance.zones import AssetKey, Zone

PEOPLE = AssetKey("t", "people")


def test_a_stray_version_folder_is_left_to_the_thorough_sweep(catalog, lake):
    stray = lake.version_dir(Zone.LANDING, PEOPLE, 7)
    stray.mkdir(parents=True)
    (stray / "part-00000.parquet").write_bytes(b"PAR1")

    assert repair(catalog, lake).clean
    assert stray.exists()

    report = repair(catalog, lake, thorough=True)
    assert report.removed == [str(stray)]
    assert not stray.exists()
