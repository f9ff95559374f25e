"""Redirects across schemes against a real HTTPS origin: http to https is followed (an upgrade),
https to http is refused (a downgrade). The origin's certificate is made for this test run, for
127.0.0.1, and requests trusts it through ``REQUESTS_CA_BUNDLE``."""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import ssl
import subprocess
from typing import TYPE_CHECKING

import pytest

from cacheroot.fetch import DownloadError, Fetcher

from .origin import Origin, body, sha256

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


def _self_signed(cert: Path, key: Path) -> None:
    """A throwaway certificate for 127.0.0.1: with ``cryptography`` if present, else openssl."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        if shutil.which("openssl") is None:
            pytest.skip("neither the cryptography package nor openssl is here to make a cert")
        subprocess.run(
            [
                "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                "-addext", "subjectAltName=IP:127.0.0.1",
                "-keyout", str(key), "-out", str(cert),
            ],
            check=True,
            capture_output=True,
        )  # fmt: skip
        return
    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(private.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(private, hashes.SHA256())
    )
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


@pytest.fixture(scope="module")
def tls_origin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Origin, Path]]:
    """An HTTPS origin on 127.0.0.1 and the certificate that a client must trust for it."""
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    _self_signed(cert, key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = Origin(tls=context).start()
    yield server, cert
    server.close()


@pytest.fixture
def https(tls_origin: tuple[Origin, Path], monkeypatch: pytest.MonkeyPatch) -> Origin:
    server, cert = tls_origin
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
    return server


def test_the_tls_origin_is_trusted_only_through_the_bundle(
    https: Origin, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = https.url(f"/ok/{name}")
    assert url.startswith("https://127.0.0.1:")
    assert Fetcher().fetch(url, sha256=sha256(body(name))).read_bytes() == body(name)
    monkeypatch.delenv("REQUESTS_CA_BUNDLE")
    with pytest.raises(DownloadError, match="CERTIFICATE_VERIFY_FAILED"):
        Fetcher(retries=0).fetch(https.url(f"/ok/2{name}"))


def test_http_to_https_is_followed(origin: Origin, https: Origin, name: str) -> None:
    url = origin.url(f"/goto/{name}?to={https.base}")
    path = Fetcher(retries=0).fetch(url, sha256=sha256(body(name)))
    assert path.read_bytes() == body(name)
    assert origin.gets[f"/goto/{name}"] == 1
    assert https.gets[f"/ok/{name}"] == 1


def test_https_to_http_is_refused(origin: Origin, https: Origin, name: str) -> None:
    url = https.url(f"/goto/{name}?to={origin.base}")
    f = Fetcher(retries=3)
    with pytest.raises(DownloadError, match="from https to http is refused") as info:
        f.fetch(url)
    assert info.value.status == 302
    assert https.gets[f"/goto/{name}"] == 1  # refused at once, not retried
    assert origin.gets[f"/ok/{name}"] == 0  # the plain-text origin was never asked
    assert not f.path(url).exists()
