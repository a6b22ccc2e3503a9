"""What Spark needs from the machine, checked up front so the message is clear."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

from governance.errors import EnvironmentProblem

REQUIRED_JAVA = 17
INSTALL_HINT = "install Java 17 or newer (e.g. `apt-get install openjdk-17-jre-headless`) or set JAVA_HOME"


def java_executable() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        return str(candidate) if candidate.is_file() else None
    return shutil.which("java")


@cache
def _java_major(executable: str) -> int | None:
    try:
        probe = subprocess.run([executable, "-version"], capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', probe.stderr + probe.stdout)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def require_java() -> None:
    """Raise EnvironmentProblem unless a Java 17+ runtime is reachable."""
    executable = java_executable()
    if executable is None:
        where = (
            f"JAVA_HOME={os.environ['JAVA_HOME']} has no bin/java"
            if os.environ.get("JAVA_HOME")
            else "no `java` on PATH"
        )
        raise EnvironmentProblem(f"Spark needs Java {REQUIRED_JAVA}: {where}; {INSTALL_HINT}")
    major = _java_major(executable)
    if major is None:
        raise EnvironmentProblem(
            f"Spark needs Java {REQUIRED_JAVA}: `{executable} -version` did not say its version; {INSTALL_HINT}"
        )
    if major < REQUIRED_JAVA:
        raise EnvironmentProblem(
            f"Spark needs Java {REQUIRED_JAVA}, found Java {major} at {executable}; {INSTALL_HINT}"
        )
