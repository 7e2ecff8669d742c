"""`kl dev-cert`: a localhost certificate signed by a throwaway CA whose key
is never written, and what it refuses."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509

from kilolock.kl.exits import EXIT_USAGE
from tests.support.kl_runner import kl_environment, run_kl


def test_it_writes_a_loopback_certificate_and_its_ca_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The certificate names localhost, 127.0.0.1, ::1 and every --host, is
    signed by the CA in trust/ (alone in that directory, as SSL_CERT_DIR
    wants), the key is readable by its owner only, and no CA key exists."""
    monkeypatch.chdir(tmp_path)
    env = kl_environment(home=tmp_path / "home")
    result = run_kl("dev-cert", "--host", "Kilolock.Test", "--host", "10.1.2.3", env=env).check()
    directory = tmp_path / "kilolock-dev-cert"
    assert sorted(path.relative_to(directory).as_posix() for path in directory.rglob("*")) == [
        "cert.pem", "key.pem", "trust", "trust/ca.pem"]
    assert stat.S_IMODE((directory / "key.pem").stat().st_mode) == 0o600
    cert = x509.load_pem_x509_certificate((directory / "cert.pem").read_bytes())
    ca = x509.load_pem_x509_certificate((directory / "trust" / "ca.pem").read_bytes())
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost", "kilolock.test"]
    assert names.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"),
        ipaddress.ip_address("10.1.2.3")]
    assert "PRIVATE KEY" not in (directory / "trust" / "ca.pem").read_text()
    assert f"export SSL_CERT_DIR={directory / 'trust'}" in result.out
    assert "--listen ssl:8443:interface=127.0.0.1:privateKey=kilolock-dev-cert/key.pem" \
           in result.out


def test_it_refuses_to_replace_files_and_bad_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second run keeps the first run's files unless --force; a host that
    is neither a name nor an address, or a validity over 397 days, is a
    usage error; nothing is written then."""
    monkeypatch.chdir(tmp_path)
    env = kl_environment(home=tmp_path / "home")
    run_kl("dev-cert", env=env).check()
    first = (tmp_path / "kilolock-dev-cert" / "cert.pem").read_bytes()
    again = run_kl("dev-cert", env=env)
    assert again.code == EXIT_USAGE and "--force" in again.err
    assert (tmp_path / "kilolock-dev-cert" / "cert.pem").read_bytes() == first
    run_kl("dev-cert", "--force", env=env).check()
    assert (tmp_path / "kilolock-dev-cert" / "cert.pem").read_bytes() != first
    for argv in (("--host", "a b"), ("--host", "x/y"), ("--days", "398")):
        refused = run_kl("dev-cert", "--dir", "elsewhere", *argv, env=env)
        assert refused.code == EXIT_USAGE, argv
    assert not (tmp_path / "elsewhere").exists()
