"""The site config as an administrator meets it: ``dsfed-server identity``'s output pasted
under ``[federation]`` is a working peer entry, and a malformed credential hash stops the site with
one line naming the file, the line, the user and the command to run, showing no hash."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from dsfed_server.disclosure.secure_sum import parse_identity, public_identity
from dsfed_server.provision import ProvisionedSite, provision
from dsfed_server.service import SiteService
from sitekit import ROOT, dsfed_server, write_table


def _site(tmp_path: Path, name: str) -> ProvisionedSite:
    """A site of its own (provisioned alone, so its config has no [federation] section yet)."""
    write_table(tmp_path / "data" / name, pd.DataFrame({"x": range(20)}))
    rules = ROOT / "disclosure_rules" / "default.toml"
    return provision(tmp_path / name, {name: (tmp_path / "data" / name, rules)})[name]


def _line(text: str, needle: str, start: int = 0) -> int:
    """1-based number of the first line at or after line ``start`` holding ``needle``."""
    return next(i for i, line in enumerate(text.splitlines(), start=1) if i > start and needle in line)


def test_identity_output_pasted_under_federation_pins_the_peer(tmp_path: Path):
    a, b, c = (_site(tmp_path, name) for name in ("hospital.a", "b", "c"))
    printed = {}
    for site in (a, c):
        result = dsfed_server("identity", str(site.config))
        assert result.returncode == 0, result.stderr
        printed[site.name] = result.stdout
    assert "[federation]" in printed["c"]  # the printed comment says where the line goes

    # the administrator of b adds the header and pastes both outputs as they are
    b.config.write_text(b.config.read_text() + "\n[federation]\n" + printed["hospital.a"] + printed["c"])
    checked = dsfed_server("check", str(b.config))
    assert checked.returncode == 0, checked.stderr

    service = SiteService.from_config_file(b.config)
    for site in (a, c):
        expected = public_identity(site.secret.read_bytes())  # the key from the secret, independently
        assert service.config.federation.peers[site.name] == expected
        assert service.peers[site.name] == parse_identity(expected)


@pytest.fixture
def config_text(tmp_path: Path) -> tuple[Path, str]:
    site = _site(tmp_path, "s")
    return site.config, site.config.read_text()


def _hashes(text: str) -> list[str]:
    """Every credential hash in a config, and each hash's salt and digest on their own."""
    found = re.findall(r'"((?:scrypt|sha256)\$[^"]+)"', text)
    return found + [part for h in found for part in h.split("$")[-2:] if len(part) >= 16]


def _refusal(path: Path, config: str) -> str:
    """``dsfed-server check``'s message on a config it refuses: one line, no hash of ``config`` in it."""
    result = dsfed_server("check", str(path))
    assert result.returncode == 2
    message = result.stderr.strip()
    assert "\n" not in message
    for secret in _hashes(config):
        assert secret not in message
    return message


def test_a_malformed_password_hash_is_one_line_naming_file_line_user_and_command(config_text):
    path, text = config_text
    # the second user's hash loses a character of its salt in a copy-paste
    second = _line(text, "[[users]]", _line(text, "[[users]]"))
    target = _line(text, "password_hash", second)
    user = re.search(r'name = "([^"]+)"', text.splitlines()[second]).group(1)
    lines = text.splitlines()
    lines[target - 1] = re.sub(r"(\$[A-Za-z0-9+/]+==)", lambda m: m.group(1)[:-3] + "==", lines[target - 1], count=1)
    path.write_text("\n".join(lines) + "\n")

    message = _refusal(path, text)
    assert message.startswith(f"dsfed-server: {path.resolve()}:{target}: users.1.password_hash ")
    assert f"entry {user!r}" in message and "run 'dsfed-server hash-password'" in message


def test_a_user_without_credentials_points_at_its_entry_and_shows_no_hash(config_text):
    path, text = config_text
    first = _line(text, "[[users]]")
    lines = [line for i, line in enumerate(text.splitlines(), start=1)
             if not (first < i < first + 5 and line.startswith(("password_hash", "token_hashes")))]
    path.write_text("\n".join(lines) + "\n")

    message = _refusal(path, text)
    assert message.startswith(f"dsfed-server: {path.resolve()}:{first}: users.0 ([[users]] entry 'analyst')")
    assert "neither a password_hash nor token_hashes" in message and "dsfed-server hash-password" in message


def test_a_name_twice_points_at_the_users_and_shows_no_hash(config_text):
    path, text = config_text
    path.write_text(text.replace('name = "analyst2"', 'name = "analyst"'))
    assert _refusal(path, text) == (f"dsfed-server: {path.resolve()}:{_line(text, '[[users]]')}: users: "
                                    "Value error, user names must be unique; 'analyst' appears more than once")
