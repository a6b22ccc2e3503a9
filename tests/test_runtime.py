"""Without Java 17, Custody says so before Spark does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from governance.errors import EnvironmentProblem
from governance.runtime import require_java

CUSTODY = Path(sys.executable).with_name("custody")


def test_java_17_is_found_here():
    require_java()


def test_a_missing_java_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-java"))
    with pytest.raises(EnvironmentProblem, match="Spark needs Java 17: JAVA_HOME=.* has no bin/java; install Java 17"):
        require_java()


def test_an_old_java_is_a_clear_error(monkeypatch, tmp_path):
    fake = tmp_path / "jdk" / "bin" / "java"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    with pytest.raises(EnvironmentProblem, match="found Java 11"):
        require_java()


def test_the_cli_says_so_and_exits_1_without_java(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env.update(PATH=str(Path(sys.executable).parent), CUSTODY_HOME=str(tmp_path / "home"))
    out = subprocess.run(
        [str(CUSTODY), "ingest", "sales/clients", "--as", "bob"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd=Path(__file__).parents[1],
    )
    assert out.returncode == 1
    assert "error: Spark needs Java 17: no `java` on PATH" in out.stderr
