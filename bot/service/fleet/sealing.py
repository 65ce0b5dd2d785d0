"""Clone tokens sealed for one agent: the agent makes a key pair when it starts and keeps the private
half in memory; the service encrypts each token to the public half (RSA-OAEP, SHA-256) before it
writes it to the database. Whoever else reads the row (another agent, a backup) gets nothing usable.
"""

from __future__ import annotations

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

_OAEP = padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA256()), algorithm=hashes.SHA256(), label=None)


class SealError(Exception):
    """A public key that is not one, or a sealed token that this key cannot open."""


class Opener:
    """The agent's key pair: the public half goes with each token request."""

    def __init__(self) -> None:
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.public_pem = (
            self._key.public_key()
            .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
            .decode()
        )

    def open(self, sealed: bytes) -> str:
        try:
            return self._key.decrypt(sealed, _OAEP).decode()
        except ValueError as exc:
            raise SealError("the sealed token does not open with this agent's key") from exc


def seal(public_pem: str, secret: str) -> bytes:
    try:
        key = serialization.load_pem_public_key(public_pem.encode())
    except ValueError as exc:
        raise SealError("the token request's public key is not a PEM public key") from exc
    if not isinstance(key, rsa.RSAPublicKey) or key.key_size < 2048:
        raise SealError("the token request's public key is not an RSA key of 2048 bits or more")
    return key.encrypt(secret.encode(), _OAEP)
