"""The webhook's serving certificate, made with `cryptography`: a small CA of its own and a
certificate for the webhook Service's DNS names (and any IPs), written as `ca.crt`, `tls.crt`
and `tls.key` — the layout of a `kubernetes.io/tls` Secret plus its CA, which the webhook
configurations carry as `caBundle`. `due()` says when to rotate: a third of the lifetime
before expiry, as cert-manager does by default.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Issued:
    ca_pem: bytes
    ca_key_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    not_after: dt.datetime

    def write(self, folder: Path) -> None:
        """Each file replaced atomically (a reader never sees half a certificate); the key
        last-but-one and the certificate last, so a reload after `tls.crt` sees a pair."""
        folder.mkdir(parents=True, exist_ok=True)
        files = (("ca.crt", self.ca_pem, 0o644), ("ca.key", self.ca_key_pem, 0o600),
                 ("tls.key", self.key_pem, 0o600), ("tls.crt", self.cert_pem, 0o644))  # fmt: skip
        for name, data, mode in files:
            tmp = folder / f".{name}.new"
            tmp.write_bytes(data)
            tmp.chmod(mode)
            tmp.replace(folder / name)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _new_ca(now: dt.datetime, days: int) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    usage = x509.KeyUsage(
        digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
        key_encipherment=False, data_encipherment=False, key_agreement=False,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("gpucarve-webhook-ca"))
        .issuer_name(_name("gpucarve-webhook-ca"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage, critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def issue(
    dns_names: list[str],
    ips: list[str],
    now: dt.datetime,
    days: int = 365,
    ca: tuple[bytes, bytes] | None = None,
) -> Issued:
    """A serving certificate valid from `now` (the clock is the caller's), signed by `ca`
    (its certificate and key, PEM: a rotation keeps the CA, so the webhook configurations'
    caBundle stays right) or by a new CA valid ten times as long."""
    if ca is None:
        ca_cert, ca_key = _new_ca(now, days * 10)
    else:
        ca_cert = x509.load_pem_x509_certificate(ca[0])
        loaded = serialization.load_pem_private_key(ca[1], password=None)
        if not isinstance(loaded, ec.EllipticCurvePrivateKey):
            raise ValueError("the CA key is not an EC key made by gpucarve webhook certs")
        ca_key = loaded
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    end = now + dt.timedelta(days=days)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(dns_names[0] if dns_names else ips[0]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    pkcs8, none = serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    return Issued(
        ca_cert.public_bytes(pem),
        ca_key.private_bytes(pem, pkcs8, none),
        cert.public_bytes(pem),
        key.private_bytes(pem, pkcs8, none),
        end,
    )


def due(cert_pem: bytes, now: dt.datetime) -> bool:
    """Time to rotate: within the last third of the certificate's lifetime."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return now >= end - (end - start) / 3


def service_names(service: str, namespace: str) -> list[str]:
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc"]
