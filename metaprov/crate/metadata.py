"""The dataset-level metadata of a crate: license, authors, name, description, date.

Input: the user's ``--license``/``--author``/``--name``/``--description``/``--date-published``.
Output: checked values (a license IRI, Person entities) set on the crate's root, and warnings for
what a repository will want and is missing (a license, an author).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from metaprov.errors import UsageError

ORCID_RE = re.compile(r"^(?:https?://orcid\.org/)?(\d{4}-\d{4}-\d{4}-\d{3}[\dX])/?$")
SPDX_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+-]*$")
DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
NO_LICENSE = (
    "No license was given when this crate was made: ask its authors before reusing it "
    "(metaprov crate --license sets one)."
)


@dataclass(frozen=True)
class Author:
    """A crate author: ``id`` an ORCID or other IRI, or a local ``#author-...`` id."""

    id: str
    name: str | None


def orcid_checksum_ok(orcid: str) -> bool:
    """ISO 7064 MOD 11-2 check digit of an ORCID iD (``0000-0002-1825-0097``)."""
    digits = orcid.replace("-", "")
    total = 0
    for ch in digits[:-1]:
        total = (total + int(ch)) * 2
    check = (12 - total % 11) % 11
    return digits[-1] == ("X" if check == 10 else str(check))


def parse_author(text: str) -> Author:
    """``"Jane Doe <https://orcid.org/0000-0002-1825-0097>"``, an ORCID iD or IRI alone, or a name.

    Raises:
        UsageError: an ORCID iD whose check digit is wrong, or an empty value.
    """
    text = text.strip()
    m = re.match(r"^(.*?)\s*<([^>]+)>$", text)
    name, ident = (m.group(1).strip() or None, m.group(2).strip()) if m else (None, text)
    orcid = ORCID_RE.match(ident)
    if orcid:
        if not orcid_checksum_ok(orcid.group(1)):
            raise UsageError(
                f"{ident!r} is not a valid ORCID iD (wrong check digit)",
                hint="copy the iD from the person's ORCID record, e.g. https://orcid.org/0000-0002-1825-0097",
            )
        return Author(f"https://orcid.org/{orcid.group(1)}", name)
    if re.match(r"^https?://\S+$", ident):
        return Author(ident, name)
    if m:
        raise UsageError(
            f"{ident!r} is neither an ORCID iD nor an http(s) IRI", hint='use "Name <ORCID>"'
        )
    if not text:
        raise UsageError("empty --author", hint='use "Name <ORCID>", an ORCID iD or a name')
    return Author(f"#author-{quote(text.lower().replace(' ', '-'), safe='-')}", text)


def license_entity(value: str) -> dict[str, Any]:
    """A license entity from an SPDX license identifier (``CC-BY-4.0``, any case) or a URL.

    The identifier is checked against the SPDX license list that the ``packaging`` library
    bundles (PyPA's own, used for the ``License-Expression`` of package metadata): an id that
    is not on the list would be written as a broken ``https://spdx.org/licenses/...`` IRI.

    Raises:
        UsageError: anything else (naming the nearest SPDX ids).
    """
    value = value.strip()
    if re.match(r"^https?://\S+$", value):
        return {"@id": value, "@type": "CreativeWork", "name": value}
    spdx = spdx_id(value)
    return {
        "@id": f"https://spdx.org/licenses/{spdx}",
        "@type": "CreativeWork",
        "name": spdx,
        "identifier": spdx,
    }


def spdx_id(value: str) -> str:
    """The canonical SPDX license identifier of ``value`` (``cc-by-4.0`` -> ``CC-BY-4.0``).

    Raises:
        UsageError: ``value`` is not one SPDX license identifier (an expression such as
            ``MIT OR Apache-2.0``, a ``LicenseRef-``, or an unknown id); names the nearest ids.
    """
    from packaging.licenses import InvalidLicenseExpression, canonicalize_license_expression

    hint = "e.g. --license CC-BY-4.0 or --license https://creativecommons.org/licenses/by/4.0/"
    if SPDX_RE.match(value) and not value.lower().startswith("licenseref-"):
        try:
            canonical = canonicalize_license_expression(value)
        except InvalidLicenseExpression:
            canonical = ""
        if canonical and SPDX_RE.match(canonical):
            return canonical
        near = _nearest_spdx(value)
        if near:
            hint = "did you mean " + ", ".join(near) + "? (or give the license's URL)"
        raise UsageError(f"license {value!r} is not an SPDX license identifier", hint=hint)
    raise UsageError(
        f"license {value!r} is neither an SPDX license identifier nor a URL",
        hint=hint + " (one license: for several, give the URL of a page naming them)",
    )


def _nearest_spdx(value: str) -> list[str]:
    """Up to three SPDX ids close to ``value`` (from packaging's bundled list)."""
    import difflib

    try:
        from packaging.licenses._spdx import LICENSES
    except ImportError:  # pragma: no cover - a packaging without its list
        return []
    ids = {k: v["id"] for k, v in LICENSES.items() if not v.get("deprecated")}
    low = value.lower()
    starts = sorted(k for k in ids if k.startswith(low))
    close = difflib.get_close_matches(low, list(ids), n=3, cutoff=0.75)
    return [ids[k] for k in dict.fromkeys(close + starts)][:3]


def check_date(value: str) -> str:
    """``YYYY-MM-DD`` (or a full ISO 8601 date-time), else UsageError."""
    if DATE_RE.match(value) or re.match(
        r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$", value
    ):
        return value
    raise UsageError(
        f"date {value!r} is not an ISO 8601 date", hint="e.g. --date-published 2024-04-19"
    )
