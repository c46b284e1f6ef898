"""The site secret that seeds DP noise: made by the CLI, refused when short or readable by others."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dsfed_server.config import read_secret
from dsfed_server.tomlfile import ConfigFileError


def test_new_secret_command_writes_a_private_file(tmp_path):
    path = tmp_path / "site.secret"
    result = subprocess.run([sys.executable, "-m", "dsfed_server.cli", "new-secret", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert len(read_secret(path)) == 32 and (path.stat().st_mode & 0o777) == 0o600
    again = subprocess.run([sys.executable, "-m", "dsfed_server.cli", "new-secret", str(path)],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "not overwriting" in again.stderr


def test_short_or_shared_secrets_are_refused(tmp_path):
    short = tmp_path / "short.secret"
    short.write_bytes(b"x" * 16)
    os.chmod(short, 0o600)
    with pytest.raises(ConfigFileError, match="at least 32"):
        read_secret(short)
    shared = tmp_path / "shared.secret"
    shared.write_bytes(os.urandom(32))
    os.chmod(shared, 0o644)
    with pytest.raises(ConfigFileError, match="chmod 600"):
        read_secret(shared)
