"""bot.core.secrets: the one redaction the logs and every run's output go through."""

from __future__ import annotations

from pathlib import Path

from bot.core.secrets import redact
from runner.backends.base import Step
from runner.backends.host import HostRunner


def test_known_secrets_are_masked_longest_first_and_short_ones_left_alone() -> None:
    # "abcd1234" inside "abcd1234-long" must not leave "-long" showing a half-masked secret.
    text = "a abcd1234-long b abcd1234 c ab"
    assert redact(text, ["abcd1234", "abcd1234-long", "ab"]) == "a *** b *** c ab"


def test_credentials_are_masked_by_their_shape_without_being_named() -> None:
    token = "ghs_" + "A1b2C3d4" * 4
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nxyz\n-----END RSA PRIVATE KEY-----"
    jwt = "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiIxMjMifQ.c2lnbmF0dXJl"
    text = f"token {token}\n{pem}\nAuthorization: Bearer {jwt}\nhttps://x-access-token:{token}@github.com/o/r"
    assert redact(text) == "token ***\n***\nAuthorization: Bearer ***\nhttps://***@github.com/o/r"


async def test_a_run_that_prints_a_token_it_was_never_told_about_shows_it_masked(tmp_path: Path) -> None:
    token = "ghp_" + "Z9y8X7w6" * 4
    runner = HostRunner(reason="test")
    result = await runner.run(Step(name="leak", argv=["sh", "-c", f"echo leaked {token}"]), tmp_path)
    await runner.close()
    assert result.output.strip() == "leaked ***"
