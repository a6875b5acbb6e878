"""The metaprov exception hierarchy.

Every error a user can meet derives from :class:`MetaprovError` and carries the exit code the
command-line interface returns for it. Library code raises these (wrapping third-party errors with
``raise ... from``); only :mod:`metaprov.cli` prints them.
"""

from __future__ import annotations

from pathlib import Path


def terminal_safe(text: str) -> str:
    """``text`` safe to print on a terminal: control and format characters but line ends and
    tabs (escape sequences, bidi overrides: a file name of a run can hold them) written as
    ``\\xNN`` / ``\\uNNNN``."""
    if text.isprintable():
        return text
    import unicodedata

    out = []
    for ch in text:
        if (
            ch in "\n\t"
            or not unicodedata.category(ch).startswith("C")
            and ch not in "\u2028\u2029"
        ):
            out.append(ch)
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
    return "".join(out)


class MetaprovError(Exception):
    """Root of all metaprov errors.

    Attributes:
        exit_code: the process exit code the CLI uses for this error.
    """

    exit_code: int = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\n  hint: {self.hint}"
        return self.message


class UsageError(MetaprovError):
    """The call itself is wrong (an unknown option value, a missing argument)."""

    exit_code = 2


class MissingDependency(UsageError):
    """A feature needs an optional dependency that is not installed (names the extra to install)."""


def require(module: str, *, extra: str, feature: str) -> None:
    """Import ``module`` or raise :class:`MissingDependency` naming the extra that provides it.

    Raises:
        MissingDependency: ``pip install 'metaprov[<extra>]'`` is the hint.
    """
    import importlib

    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependency(
            f"{feature} needs {module}, which is not installed",
            hint=f"pip install 'metaprov[{extra}]'",
        ) from exc


class ScriptFailed(MetaprovError):
    """A script run by metaprov (``metaprov capture``) failed: the exit code is the script's own
    (128 + N when a signal N ended it)."""

    def __init__(self, message: str, *, returncode: int, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.exit_code = 128 - returncode if returncode < 0 else (returncode or 1)


class InputError(MetaprovError):
    """An input file or directory cannot be used. Names the file, and the row and column if known."""

    exit_code = 3

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        column: str | None = None,
        hint: str | None = None,
    ) -> None:
        where = []
        if path is not None:
            where.append(str(path))
        if line is not None:
            where.append(f"line {line}")
        if column is not None:
            where.append(f"column {column!r}")
        full = f"{': '.join([', '.join(where), message]) if where else message}"
        super().__init__(full, hint=hint)
        self.path = None if path is None else Path(path)
        self.line = line
        self.column = column


class FormatError(MetaprovError):
    """An unknown or unavailable output/input format."""

    exit_code = 4


class ValidationError(MetaprovError):
    """An export does not conform to the shapes. ``report`` holds the readable SHACL report."""

    exit_code = 5

    def __init__(self, message: str, *, report: str = "", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.report = report


class StoreError(MetaprovError):
    """A triple store cannot be opened, written or reached."""

    exit_code = 6


class QueryError(MetaprovError):
    """A SPARQL question is unknown, malformed, or its parameters are wrong."""

    exit_code = 7


class LimitError(MetaprovError):
    """The requested work exceeds a documented limit (e.g. PROV-N for a huge run)."""

    exit_code = 8


class OutputError(MetaprovError):
    """An output cannot be written: a directory or an input file named as output, a parent that is
    a file, a full disk. Nothing is left half-written under the output's name."""

    exit_code = 9


class CampaignError(MetaprovError):
    """Some runs of a campaign failed; the others completed. ``manifest`` holds every run's
    outcome (the failed ones with their error), as written to the campaign's manifest.json."""

    exit_code = 10

    def __init__(self, message: str, *, manifest: dict, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.manifest = manifest
