"""One redaction, for the service's logs and for everything a run prints back.

Known secrets (the webhook secret, the App's key and its lines, installation tokens) are replaced
longest first, so no secret is ever half hidden; credentials GitHub issues are recognised by
their shape too, so a token the bot was never told about does not get through either.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MASK = "***"
SECRET_MIN_LEN = 4  # shorter "secrets" would blank out ordinary words

# Installation tokens (ghs_…), personal tokens (ghp_, github_pat_…), JWTs, PEM private keys and
# credentials in a URL (x-access-token:…@).
_CREDENTIALS = re.compile(
    r"gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"
    r"|x-access-token:[^@\s]+"
)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every secret in ``secrets`` and every credential-shaped string as ``***``."""
    for secret in sorted({s for s in secrets if len(s) >= SECRET_MIN_LEN}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return _CREDENTIALS.sub(MASK, text)
