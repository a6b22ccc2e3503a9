"""`make test` sets up what the tests need: system packages it may not install stop it at once, with
the one command to run."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.conftest import ROOT

SCRIPT = ROOT / "scripts" / "system-packages"
TOOLS = ("bash", "sed", "awk", "head", "id", "env")


def test_the_packages_the_tests_need_are_here():
    done = subprocess.run([str(SCRIPT)], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stderr) == (0, "")


def test_missing_packages_a_user_may_not_install_stop_with_the_command_to_run():
    with tempfile.TemporaryDirectory() as folder:
        bin_dir = Path(folder, "bin")
        bin_dir.mkdir()
        for tool in TOOLS:
            (bin_dir / tool).symlink_to(shutil.which(tool))
        # apt-get is there, as on Debian, but never gets to run: the user may not install.
        apt_get = bin_dir / "apt-get"
        apt_get.write_text("#!/bin/sh\nexit 99\n")
        apt_get.chmod(0o755)
        Path(folder).chmod(0o755)
        # No java, no sudo on this PATH; as root, the script runs as an unprivileged user.
        command = ["env", "-i", f"PATH={bin_dir}", "bash", str(SCRIPT)]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "nobody", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("The tests need system packages that are not installed: openjdk-17-jre-headless")
    assert lines[-1].startswith(
        "Install them, then run make test again:  sudo apt-get install -y openjdk-17-jre-headless"
    )
