"""CUSTODY_SPARK_CONF gives Spark any setting; the project's code is packed for a cluster's executors."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest

from governance.errors import InvalidInput
from governance.spark.conf import code_archive, spark_conf
from resources.spark import session_conf
from tests.conftest import ROOT


def test_pairs_separated_by_commas_or_new_lines_are_settings():
    assert spark_conf("spark.executor.memory=2g, spark.cores.max=4\nspark.executor.cores = 2") == {
        "spark.executor.memory": "2g",
        "spark.cores.max": "4",
        "spark.executor.cores": "2",
    }


def test_a_file_in_spark_defaults_form_is_read(tmp_path):
    path = tmp_path / "spark-defaults.conf"
    path.write_text("# the cluster's share\nspark.cores.max   8\n\nspark.executor.extraJavaOptions=-Dx=1 -Dy=2\n")
    assert spark_conf(str(path)) == {"spark.cores.max": "8", "spark.executor.extraJavaOptions": "-Dx=1 -Dy=2"}


def test_a_line_without_a_value_names_the_file_and_line(tmp_path):
    path = tmp_path / "spark.conf"
    path.write_text("spark.cores.max 8\nspark.executor.memory\n")
    with pytest.raises(InvalidInput, match=rf"^{path}, line 2: spark.executor.memory is not a key and a value$"):
        spark_conf(str(path))


def test_a_missing_file_is_named():
    with pytest.raises(InvalidInput, match="CUSTODY_SPARK_CONF: /no/such/spark.conf does not exist"):
        spark_conf("/no/such/spark.conf")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("executor.memory=2g", "item 1: executor.memory is not a Spark setting"),
        ("spark.cores.max=4,oops", r"item 2 \(oops\) is not KEY=VALUE"),
        ("spark.master=spark://elsewhere:7077", "spark.master is set by CUSTODY_SPARK_MASTER, not here"),
    ],
)
def test_bad_pairs_are_refused_with_their_position(value, message):
    with pytest.raises(InvalidInput, match=message):
        spark_conf(value)


def test_the_deployments_settings_come_after_ours_and_before_the_resources():
    conf = session_conf(
        "spark://h:7077", {"spark.cores.max": "1"}, {"spark.cores.max": "4", "spark.sql.shuffle.partitions": "64"}
    )
    assert conf["spark.sql.shuffle.partitions"] == "64"
    assert conf["spark.cores.max"] == "1"
    assert conf["spark.master"] == "spark://h:7077"


def test_the_code_archive_holds_the_packages_python_files_and_is_named_by_content(tmp_path):
    first = code_archive(tmp_path, ("governance", "tests.transforms"))
    assert code_archive(tmp_path, ("tests.transforms", "governance")) == first
    names = zipfile.ZipFile(first).namelist()
    assert "governance/__init__.py" in names and "tests/transforms.py" in names
    assert not [name for name in names if "__pycache__" in name or not name.endswith(".py")]
    assert [path.name for path in tmp_path.iterdir()] == [first.name]


def test_a_package_that_cannot_be_imported_cannot_be_shipped(tmp_path):
    with pytest.raises(InvalidInput, match="cannot ship package no_such_package"):
        code_archive(tmp_path, ("no_such_package.transforms",))


def test_the_resource_starts_spark_again_when_its_session_was_stopped(tmp_path):
    """One Spark resource serves every run of a code location's process."""
    script = (
        "from resources.spark import SparkResource\n"
        "spark = SparkResource(master='local[1]')\n"
        "first = spark.session(print)\n"
        "first.stop()\n"
        "second = spark.session(print)\n"
        "print('rows', second.range(3).count(), second is not first)\n"
    )
    env = {**os.environ, "CUSTODY_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.stdout.count("starting Spark (local[1])") == 2, done.stderr[-2000:]
    assert "rows 3 True" in done.stdout, done.stderr[-2000:]
