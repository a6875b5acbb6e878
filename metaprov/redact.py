"""The secret filter every captured or ingested string passes (``docs/capture.md``, *Secrets*).

:func:`looks_secret` says whether a value (or the name it is stored under) looks like a secret:
credentials in a URL, a known token prefix (``ghp_``, ``glpat-``, ``xoxb-``, ``AKIA``, ...), a
private key, ``password=``, or a long run of mixed letters and digits (a git commit or a SHA-256
digest excepted). :func:`scrub` applies it to every string of a JSON-like record — a git branch,
tag, remote or ``describe``, a path, a package location, a host name — and withholds those that
match, saying where (never what) in its answer.
"""

from __future__ import annotations

import re
from typing import Any

_SECRET_NAME = re.compile(
    r"(TOKEN|SECRET|PASSW|PASSWD|PWD|KEY|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE)", re.I
)
_SECRET_VALUE = re.compile(
    r"(://[^/\s:@]+:[^/\s@]+@)"  # credentials in a URL
    r"|((?:\b|_)(?:gh[pousr]_|github_pat_|glpat-|xox[abpr]-|sk-|AKIA|ASIA|AIza)[A-Za-z0-9_\-]{8,})"
    r"|(-----BEGIN [A-Z ]*PRIVATE KEY-----)"
    r"|((?:password|passwd|token|secret|api[_-]?key)\s*[=:])",
    re.I,
)
#: A record's keys under which a value is a digest or a commit, kept whatever it looks like.
DIGEST_KEYS = frozenset({"sha256", "commit"})

__all__ = ["looks_secret", "scrub", "redact_words", "DIGEST_KEYS", "WITHHELD"]


def looks_secret(value: Any, name: str = "") -> bool:
    """True when a value (or the name it is stored under) looks like a secret.

    Example:
        >>> looks_secret("ghp_0123456789abcdefABCDEF"), looks_secret("gpu-debug")
        (True, False)
    """
    if name and _SECRET_NAME.search(name):
        return True
    text = str(value)
    if _SECRET_VALUE.search(text):
        return True
    # a long unbroken run of base64/hex characters with digits and letters mixed: a key
    for word in re.findall(r"[A-Za-z0-9+/=_\-]{32,}", text):
        if (
            re.search(r"\d", word)
            and re.search(r"[A-Za-z]", word)
            and not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", word)
        ):  # git commits and sha256 digests are kept
            return True
    return False


def scrub(record: Any, where: str = "") -> tuple[Any, list[str]]:
    """``record`` with every string that :func:`looks_secret` replaced by None.

    Walks dicts and lists (a JSON document). A digest (a value under ``sha256`` or ``commit``
    that is 40 or 64 hex digits) is kept; a path is judged component by component, and a UUID
    (a Dask client's id) is not a key.

    Returns:
        The scrubbed copy, and the places withheld (``git.branch``, ``packages[3].location``).

    Example:
        >>> scrub({"git": {"branch": "feature/x-ghp_" + "a1" * 18, "dirty": False}})
        ({'git': {'branch': None, 'dirty': False}}, ['git.branch'])
    """
    withheld: list[str] = []
    return _scrub(record, where, "", withheld), withheld


#: What stands in a text for a word withheld by :func:`redact_words`.
WITHHELD = "[withheld: looks like a secret]"


def redact_words(text: str) -> tuple[str, int]:
    """``text`` (a command line) with each word that looks like a secret replaced by
    :data:`WITHHELD`, and the value after an option named like a secret (``--token VALUE``);
    the other words and the spacing are kept.

    Returns:
        The text, and how many words were withheld.

    Example:
        >>> redact_words("python app.py --token abc123 --n 4")
        ('python app.py --token [withheld: looks like a secret] --n 4', 1)
    """
    parts = re.split(r"(\s+)", text)
    count = 0
    after_secret_option = False
    for i, word in enumerate(parts):
        if not word or word.isspace():
            continue
        option = word.startswith("-") and "=" not in word
        if after_secret_option or _secret_text(word):
            parts[i] = WITHHELD
            count += 1
            after_secret_option = False
            continue
        after_secret_option = option and bool(_SECRET_NAME.search(word.lstrip("-")))
    return "".join(parts), count


def _scrub(obj: Any, where: str, key: str, withheld: list[str]) -> Any:
    if isinstance(obj, dict):
        return {
            k: _scrub(v, f"{where}.{k}" if where else str(k), str(k), withheld)
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [_scrub(v, f"{where}[{i}]", key, withheld) for i, v in enumerate(obj)]
    if isinstance(obj, str) and obj:
        if key in DIGEST_KEYS and re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", obj):
            return obj
        if _secret_text(obj):
            withheld.append(where or "value")
            return None
    return obj


def _secret_text(text: str) -> bool:
    """:func:`looks_secret` for a string that may be a path: a long run of letters and digits
    counts only within one path component (``/usr/lib/python3.11/site-packages`` is a path,
    not a key); a token or a URL's credentials count anywhere."""
    if _SECRET_VALUE.search(text):
        return True
    text = _UUID.sub("-", text)  # a Dask client or key id, not a key
    parts = text.split("/")
    return any(looks_secret(_STORE_HASH.sub(r"\1", part)) for part in parts[:-1]) or (
        bool(parts) and looks_secret(parts[-1])
    )


#: A package store's hash as a whole folder name or its tail (Spack installs every package in
#: ``<name>-<version>-<32 base32 letters>`` and views in ``._view/<hash>``; Nix in
#: ``/nix/store/<32 nix-base32 letters>-<name>``): a folder named by its build, not a key. Only
#: a folder of a path (never the last part, never a bare value) is judged this way, and the
#: alphabets leave out the digits 0, 1, 8, 9 (Spack) or e, o, u, t (Nix) that a random hex or
#: alphanumeric token of this length is almost sure to hold.
_STORE_HASH = re.compile(r"(^|-)[a-z2-7]{32}$|^()[0-9a-df-np-sv-z]{32}(?=-[A-Za-z])")

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
