"""Formatting helpers."""


def shout(word: str) -> str:
    """Return ``word`` in capitals with an exclamation mark."""
    return word.upper() + "!"


def initials(name: str) -> str:
    """Return the initials of a full name, e.g. ``Ada Lovelace`` → ``AL``."""
    return "".join(part[0].upper() for part in name.split())
