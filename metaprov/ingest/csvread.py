"""Read one Mofka-Dask CSV file into an Arrow table of text columns, accounting for every row.

Input: a CSV written by ``pandas.DataFrame.to_csv`` (first column: the unnamed row index).
Output: a :class:`CsvTable` (text columns as pandas Series, the 1-based file line of each row).

Every column is read as text so that 64-bit thread ids never pass through float and garbage in
one cell affects only that cell. Rows with the wrong number of fields (a truncated last row, a
stray comma), blank lines and rows with bytes that are not UTF-8 are not used and are recorded in
the accounting with their line number.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

from metaprov.errors import InputError
from metaprov.records import Accounting

log = logging.getLogger(__name__)

_DICT = pa.dictionary(pa.int32(), pa.string())
# Parse block: small blocks keep each thread's working set in cache (measured at 10^6 tasks:
# 4 MiB parses the scheduler file in 25 % less CPU time than 16 MiB, dictionaries included).
_BLOCK = 1 << 22


_T = TypeVar("_T")

#: Longest field a row may hold (bytes): a row with a longer one is not used, and counted with
#: its file, line and column (one value becomes one RDF literal; a triple store's loader reads a
#: line of at most 16 MiB, and one value should not cost gigabytes). The key lists of
#: ``graph.csv`` (:data:`LIST_COLUMNS`, split into keys) are exempt.
MAX_FIELD_BYTES = 4 << 20
#: Columns that hold a list of keys rather than one value.
LIST_COLUMNS = frozenset({"keys", "dependencies"})


def first_hole(path: str | os.PathLike[str], size: int | None = None) -> int:
    """The offset of the first hole of a sparse file (``size`` when it has none, or when the
    file system cannot tell): the bytes after it were never written, only its size was set."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return size if size is not None else 0
    try:
        end = os.fstat(fd).st_size if size is None else size
        hole = os.lseek(fd, 0, getattr(os, "SEEK_HOLE", 4))
        return min(hole, end)
    except OSError:
        return end
    finally:
        os.close(fd)


@dataclass
class CsvTable:
    """Text columns of one CSV file (Arrow) and the 1-based file line of each row."""

    name: str
    table: pa.Table
    lines: np.ndarray
    #: results derived from this parse, kept with it by a :class:`ParseCache` (see :meth:`derived`)
    memo: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.lines)

    @property
    def columns(self) -> list[str]:
        return self.table.column_names

    def arrow(self, col: str) -> pa.ChunkedArray:
        """The column as Arrow text (all null when the file lacks it)."""
        if col in self.table.column_names:
            return self.table.column(col)
        return pa.chunked_array([pa.nulls(len(self.lines), pa.string())])

    def get(self, col: str) -> pd.Series:
        """The column as pandas: dictionary columns as Categorical, others as text."""
        return self.arrow(col).to_pandas(types_mapper=_types_mapper).reset_index(drop=True)

    def take(self, mask: np.ndarray) -> CsvTable:
        return CsvTable(self.name, self.table.filter(pa.array(mask)), self.lines[mask])

    def derived(self, what: str, make: Callable[[], _T]) -> _T:
        """``make()``, computed once per parse a :class:`ParseCache` keeps: a file read again
        unchanged through the cache gives the result made the first time.

        Only for a pure function of this table's rows (no accounting, no state of the run: the
        same rows give an equal result) whose result the caller does not modify."""
        if self.memo is None:
            return make()
        if what not in self.memo:
            self.memo[what] = make()
        return self.memo[what]


# Unknown columns named one warning each; beyond this, one summary warning (a header of 10^5
# columns must not make 10^5 accounting entries).
_MAX_EXTRA_WARNINGS = 20


def _header(path: Path) -> list[str]:
    with path.open("rb") as fh:
        first = fh.readline()
    try:
        return _header_of(first)
    except UnicodeDecodeError as exc:
        raise InputError("the header is not UTF-8 text", path=path, line=1) from exc


def _header_of(first: bytes) -> list[str]:
    """The column names of a header line (its bytes, line end included or not)."""
    text = first.decode("utf-8")
    # The header holds plain column names; quoting is not used by pandas for these.
    return [c.strip().strip('"') for c in text.rstrip("\r\n").split(",")]


def _read_csv(
    path: Path,
    *,
    required: list[str],
    optional: list[str],
    extended: tuple[str, ...] = (),
    dictionary: tuple[str, ...] = (),
    large_rows: bool = False,
    acct: Accounting,
    select: RowSelection | None = None,
) -> CsvTable | None:
    """Read ``path`` as text columns.

    Args:
        path: the CSV file.
        required: columns without which the file cannot be used (an :class:`InputError`).
        optional: known columns that may be absent (then all NA, with a warning).
        extended: columns some writers add (e.g. the metaprov capture); absent without a warning.
        dictionary: low-cardinality columns to read dictionary-encoded (less memory).
        large_rows: rows may be larger than a parse block (graph.csv: one row per submitted
            graph), so the file is parsed as one block (rather than failing, then retrying).
        acct: accounting that receives rows read / not used.
        select: keep only some rows, chosen while the file is read in blocks (see
            :class:`RowSelection`): the whole file's text is never in memory at once.

    Returns:
        The table, or ``None`` for a zero-byte file (recorded in the accounting).
    """
    name = path.name
    if path.stat().st_size == 0:
        acct.file(name)
        acct.warn(
            name, "empty file (zero bytes, no header)", detail="treated as a file with no rows"
        )
        return None
    header = _header(path)
    if not header or all(h == "" for h in header):
        acct.file(name)
        acct.warn(name, "no header line", line=1)
        return None
    known = set(required) | set(optional) | set(extended)
    missing = [c for c in required if c not in header]
    if missing:
        raise InputError(
            f"missing required column(s) {', '.join(repr(m) for m in missing)}; the header has {header}",
            path=path,
            line=1,
            column=missing[0],
            hint="is this a Mofka-Dask / metaprov capture file?",
        )
    for c in optional:
        if c not in header:
            acct.warn(name, "missing optional column (values treated as absent)", line=1, column=c)
    # Linear in the header's width (a hostile header may hold 10^6 names): one pass to count.
    seen: set[str] = set()
    dupes: set[str] = set()
    for c in header:
        (dupes if c in seen else seen).add(c)
    if dupes:
        shown = sorted(dupes)
        more = f" and {len(shown) - 10} more" if len(shown) > 10 else ""
        raise InputError(f"duplicate column name(s) {shown[:10]}{more}", path=path, line=1)
    extra = [c for c in header if c not in known and c != ""]
    for c in extra[:_MAX_EXTRA_WARNINGS]:
        acct.warn(name, "unknown extra column ignored", line=1, column=c)
    if len(extra) > _MAX_EXTRA_WARNINGS:
        acct.warn(
            name,
            "unknown extra columns ignored",
            line=1,
            detail=f"{len(extra) - _MAX_EXTRA_WARNINGS} more beyond the {_MAX_EXTRA_WARNINGS} named",
        )

    if select is not None and not large_rows:
        try:
            return _read_selected(path, header, known, dictionary, acct, select)
        except pa.ArrowInvalid:
            # bytes that are not UTF-8, a row larger than a block: the whole-file path below
            return _select_after(path, select, acct, required, optional, extended, dictionary)

    cache = _CACHE.get()
    if cache is not None and select is None and name not in cache.skip:
        key = (
            name,
            tuple(required),
            tuple(optional),
            tuple(extended),
            tuple(dictionary),
            large_rows,
        )
        parsed = cache._parse(path, key, header, known, dictionary, large_rows)
        if parsed is not None:
            return _result(name, parsed, acct)
        # not a file the cache can parse (bytes that are not UTF-8, ...): the plain read below

    try:
        parsed = _parse_plain(path, header, known, dictionary, large_rows)
    except pa.ArrowInvalid as exc:
        if "utf8" not in str(exc).lower():
            raise InputError(f"cannot parse as CSV: {exc}", path=path) from exc
        bad_rows: list[tuple[int, str]] = []
        block = _whole_file(path) if large_rows else None
        opts = _options(header, known, dictionary, bad_rows, threads=False, block=block)
        return _read_with_bad_bytes(path, opts, acct, bad_rows)
    return _result(name, parsed, acct)


@dataclass
class _Parsed:
    """One parse of a CSV text, before accounting: the rows kept (blank lines removed), their
    1-based file lines, the rows the parser saw (kept, malformed, blank), the malformed rows
    (line, what was wrong; in the parser's order) and the blank lines."""

    table: pa.Table
    lines: np.ndarray
    total: int
    bad_rows: list[tuple[int, str]]
    blank: np.ndarray
    memo: dict[str, Any] | None = None  # (see CsvTable.derived; set when a cache keeps it)
    #: rows never parsed because their line is over a limit (line, reason): see _cut_appended
    oversized: list[tuple[int, str]] = field(default_factory=list)


def _parse_plain(
    src: Path | pa.Buffer,
    header: list[str],
    known: set[str],
    dictionary: tuple[str, ...],
    large_rows: bool,
) -> _Parsed:
    """Parse a CSV text (a file, or its bytes) with every column as text.

    Raises:
        pyarrow.ArrowInvalid: bytes that are not UTF-8 (the caller's slow path), or text that
            is not CSV.
    """
    bad_rows: list[tuple[int, str]] = []
    # Fast path: all cores. The parser then cannot tell the line number of a row it skips, so
    # when its invalid-row handler fired, the text is read again on one thread to name them.
    block = _whole_file(src) if large_rows else None
    opts = _options(header, known, dictionary, bad_rows, threads=True, block=block)
    table = _parse(src, opts, bad_rows)
    if bad_rows and opts["read_options"].use_threads:
        del table
        bad_rows.clear()
        opts = _options(header, known, dictionary, bad_rows, threads=False, block=block)
        table = _parse(src, opts, bad_rows)
    return _split(table, bad_rows)


def _split(table: pa.Table, bad_rows: list[tuple[int, str]]) -> _Parsed:
    """The parser's output -> rows kept and their lines, malformed rows, blank lines."""
    n_out = table.num_rows
    lines, total = _row_lines(n_out, bad_rows)
    blank = np.zeros(0, dtype=np.int64)
    if n_out:
        # A blank line parses as a row of nulls: not a row of data.
        allnull = np.ones(n_out, dtype=bool)
        for col in table.columns:
            allnull &= col.is_null().to_numpy(zero_copy_only=False)
        if allnull.any():
            blank = lines[allnull]
            table = table.filter(pa.array(~allnull))
            lines = lines[~allnull]
    return _Parsed(table, lines, total, list(bad_rows), blank)


def _result(name: str, parsed: _Parsed, acct: Accounting) -> CsvTable:
    """Account for a parse (the calls :func:`_finish` then :func:`_drop_blank` make)."""
    acct.read(name, parsed.total)
    _drop_malformed(name, parsed.bad_rows, acct)
    if len(parsed.blank):
        acct.drop(name, "blank line", parsed.blank)
    for line, reason in parsed.oversized:
        acct.drop(name, reason, [line], detail=_OVERSIZED_DETAIL)
    return CsvTable(name, parsed.table, parsed.lines, parsed.memo)


def _join(head: _Parsed, tail: _Parsed) -> _Parsed:
    """A file's parse from the parse of its first rows and the parse of the rows after them
    (the tail's lines counted from its own header line: shifted by the head's rows)."""
    off = head.total
    return _Parsed(
        pa.concat_tables([head.table, tail.table]),
        np.concatenate([head.lines, tail.lines + off]),
        head.total + tail.total,
        head.bad_rows + [(r + off, d) for r, d in tail.bad_rows],
        np.concatenate([head.blank, tail.blank + off]),
        oversized=head.oversized + [(r + off, d) for r, d in tail.oversized],
    )


@dataclass
class _Entry:
    size: int  # bytes parsed (the file then ended with a line end)
    digest: bytes  # SHA-256 of those bytes
    head: bytes  # the header line (its first bytes)
    parsed: _Parsed


@dataclass
class ParseCache:
    """Parses of growing CSV files, kept so that reading a file again parses only its new rows.

    Made for ``metaprov follow``: each refresh reads a fresh whole-row snapshot of a run that is
    still being written, and most of each file was already parsed by the previous refresh.
    Activate a cache around the read (nothing in the readers' signatures changes)::

        cache = ParseCache()                 # one per followed run, kept across refreshes
        with parse_cache(cache):
            records = read_run(snapshot)     # equal to read_run(snapshot) without the cache

    A file is known by its name in the run directory (the snapshots of each refresh live in
    different directories) and by the reader's options. When the file's first bytes are,
    byte for byte (SHA-256 of that many bytes of the file being read), the bytes parsed last
    time and the file has only grown, only the rows after them are parsed (with the header
    line in front) and joined to the kept table: the result — rows, their 1-based file lines,
    and every accounting call (rows read, malformed rows with line and detail, blank lines) —
    equals a fresh parse; only the table's chunk layout differs. Anything else is parsed whole
    and replaces the kept parse: a file rewritten or re-sorted (a capture's final merge, a
    snapshot's merge of worker part files), a changed header, a file that shrank, a parse that
    ended without a line end. Files holding bytes that are not UTF-8, reads with a
    :class:`RowSelection`, empty files and files without a header are never kept (read as
    without the cache). A file read again unchanged also keeps what readers derived from it
    (:meth:`CsvTable.derived`: graph.csv's parsed key literals).

    The cache keeps one Arrow table per file (about the memory of the run read without it)
    and a digest; :meth:`clear` frees them. The files must not be written while they are read
    (a snapshot's are not); one read at a time.

    Attributes:
        stats: how many reads parsed the whole file (``full``), only new rows (``appended``),
            nothing (``unchanged``) or went without the cache (``uncached``).
        skip: names of files read without the cache (files known to be rewritten at every
            read, e.g. a snapshot's merge of worker part files: checking and keeping them would
            only cost).
    """

    _entries: dict[tuple, _Entry] = field(default_factory=dict, repr=False)
    skip: set[str] = field(default_factory=set)
    stats: dict[str, int] = field(
        default_factory=lambda: {"full": 0, "appended": 0, "unchanged": 0, "uncached": 0}
    )

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every kept parse."""
        self._entries.clear()

    def _parse(
        self,
        path: Path,
        key: tuple,
        header: list[str],
        known: set[str],
        dictionary: tuple[str, ...],
        large_rows: bool,
    ) -> _Parsed | None:
        """The file's parse, from the kept one when the file only grew; ``None``: the caller
        reads the file without the cache (and no parse is kept for it)."""
        entry = self._entries.pop(key, None)
        with path.open("rb", buffering=0) as fh:
            size = os.fstat(fh.fileno()).st_size
            digest = hashlib.sha256()
            if entry is not None and entry.size <= size:
                # the kept bytes, checked on this file's bytes (read in pieces: no copy of them)
                _hash_prefix(fh, entry.size, digest)
                if digest.digest() == entry.digest:
                    # the bytes after them, streamed: hashed, and a line over the limits
                    # (:func:`_oversized_lines`) never read whole
                    cuts = _oversized_lines(fh, entry.size, size, digest, len(header), large_rows)
                    return self._appended(
                        key, entry, fh, size, cuts, digest, header, known, dictionary, large_rows
                    )
                fh.seek(0)
                digest = hashlib.sha256()
            # the file's bytes and room for one more (see _parse_closed): no copy of them
            buf = bytearray(size + 1)
            view = memoryview(buf)
            n = _read_into(fh, view[:size])
        nl = buf.find(b"\n", 0, n)
        try:
            same_header = nl >= 0 and _header_of(bytes(view[: nl + 1])) == header
        except UnicodeDecodeError:
            same_header = False
        if not same_header:  # (the file changed since its header was read)
            self.stats["uncached"] += 1
            return None
        keep = buf[n - 1] == 0x0A
        parsed = _parse_text(buf, n, keep, header, known, dictionary, large_rows)
        if parsed is None:
            self.stats["uncached"] += 1
            return None
        self.stats["full"] += 1
        if keep:
            digest.update(view[:n])
            parsed.memo = {}
            self._entries[key] = _Entry(n, digest.digest(), bytes(view[: nl + 1]), parsed)
        return parsed

    def _appended(
        self,
        key: tuple,
        entry: _Entry,
        fh: Any,
        size: int,
        cuts: list[tuple[int, int, str]],
        digest: Any,
        header: list[str],
        known: set[str],
        dictionary: tuple[str, ...],
        large_rows: bool,
    ) -> _Parsed | None:
        """The kept parse joined with the parse of the bytes ``entry.size .. size`` of ``fh``
        (already fed to ``digest``); the lines ``cuts`` (start, end, reason) among them are
        counted as rows not used and never read."""
        if _header_of(entry.head) != header:  # (the file changed since its header was read)
            self.stats["uncached"] += 1
            return None
        if size == entry.size:
            self.stats["unchanged"] += 1
            self._entries[key] = entry
            return entry.parsed
        parsed = entry.parsed
        at = entry.size
        keep = True  # the bytes so far end between rows
        for start, end, reason in [*cuts, (size, size, "")]:
            if start > at:
                # the rows up to the next cut line, parsed with the header line in front; the
                # rows before a cut must end between rows (its line is a row of its own)
                rest = os.pread(fh.fileno(), start - at, at)
                keep = start < size or rest.endswith((b"\n", b"\r"))
                buf = bytearray(len(entry.head) + len(rest) + 1)  # header, rows, room for one
                buf[: len(entry.head)] = entry.head
                buf[len(entry.head) : -1] = rest
                del rest
                tail = _parse_text(buf, len(buf) - 1, keep, header, known, dictionary, large_rows)
                del buf
                if tail is None:
                    self.stats["uncached"] += 1
                    return None
                parsed = _join(parsed, tail)
            if end > start:  # a line over the limits: one row read, not used
                empty = np.zeros(0, np.int64)
                cut = _Parsed(
                    _empty_like(parsed.table), empty, 1, [], empty, oversized=[(2, reason)]
                )
                parsed = _join(parsed, cut)
                keep = os.pread(fh.fileno(), 1, end - 1) in (b"\n", b"\r")
                log.warning(
                    "%s line %d: %s; row not used (read in pieces, never held whole)",
                    key[0],
                    parsed.total + 1,
                    reason,
                )
            at = max(at, end)
        self.stats["appended"] += 1
        if keep:
            parsed.memo = {}
            self._entries[key] = _Entry(size, digest.digest(), entry.head, parsed)
        return parsed


#: Parse the bytes appended to a kept file in pieces of at most this many bytes (hashed and
#: scanned for lines over the limits as they are read).
_SCAN = 1 << 22
_OVERSIZED_DETAIL = "row not used"


def _oversized_lines(
    fh: Any, start: int, end: int, digest: Any, columns: int, large_rows: bool
) -> list[tuple[int, int, str]]:
    """Feed the bytes ``start .. end`` of the open file ``fh`` to ``digest`` in pieces, and find
    the lines among them no parse of the file would use, whose text is therefore never read
    whole: (first byte, byte after its line end, reason), in order.

    Decided on bytes alone, whatever the quoting: a run of more than ``2 * MAX_FIELD_BYTES + 2``
    bytes without a comma or line end lies in one field whose value is longer than
    :data:`MAX_FIELD_BYTES` (a quoted value's text is at most twice its length plus its two
    quotes); a line longer than ``columns`` such fields holds one, or more fields than the
    header. A line end is LF, CR or CR LF. Files whose rows may be large (graph.csv's key
    lists, :data:`LIST_COLUMNS`) are only hashed."""
    max_gap = 2 * MAX_FIELD_BYTES + 2
    max_line = columns * (max_gap + 1)
    field_reason = f"a field longer than {MAX_FIELD_BYTES:,} bytes"
    line_reason = f"a line longer than {max_line:,} bytes (more than {columns} fields may hold)"
    cuts: list[tuple[int, int, str]] = []
    line_start = start  # first byte of the line still open
    last_sep = start - 1  # the last comma or line end seen
    open_reason = ""  # why the open line is cut ("": not cut so far)
    pos = start
    buf = bytearray(_SCAN)
    view = memoryview(buf)
    while pos < end:
        n = os.preadv(fh.fileno(), [view[: min(_SCAN, end - pos)]], pos)
        if not n:
            break
        digest.update(view[:n])
        if large_rows:
            pos += n
            continue
        a = np.frombuffer(buf, dtype=np.uint8, count=n)
        is_end = (a == 0x0A) | (a == 0x0D)
        ends = np.flatnonzero(is_end) + pos
        seps = np.flatnonzero(is_end | (a == 0x2C)) + pos
        starts = np.concatenate([[line_start], ends[:-1] + 1]).astype(np.int64)[: len(ends)]
        reasons = np.where(ends - starts > max_line, line_reason, "").astype(object)
        if len(ends) and open_reason:
            reasons[0] = open_reason
        # a run without a separator longer than a field may be: its line is cut
        bounds = np.concatenate([[last_sep], seps])
        gap_at = bounds[1:][np.diff(bounds) - 1 > max_gap]
        where = np.searchsorted(ends, gap_at)
        reasons[where[where < len(ends)]] = field_reason
        for i in np.flatnonzero(reasons != ""):
            cuts.append((int(starts[i]), int(ends[i]) + 1, str(reasons[i])))
        if len(ends):
            line_start, open_reason = int(ends[-1]) + 1, ""
        if (where >= len(ends)).any():
            open_reason = field_reason
        if len(seps):
            last_sep = int(seps[-1])
        pos += n
        # the line still open at the end of this piece
        if not open_reason and pos - 1 - last_sep > max_gap:
            open_reason = field_reason
        if not open_reason and pos - line_start > max_line:
            open_reason = line_reason
    if open_reason and line_start < end:  # a last line without a line end
        cuts.append((line_start, end, open_reason))
    # CR LF is one line end: the LF after a cut line's CR belongs to the cut
    crlf: list[tuple[int, int, str]] = []
    for a0, b0, why in cuts:
        if b0 < end and os.pread(fh.fileno(), 2, b0 - 1) == b"\r\n":
            b0 += 1
        crlf.append((a0, b0, why))
    return crlf


def _empty_like(table: pa.Table) -> pa.Table:
    """A table of no rows with ``table``'s columns and types (dictionaries kept)."""
    return table.slice(0, 0)


def _parse_text(
    buf: bytearray,
    n: int,
    keep: bool,
    header: list[str],
    known: set[str],
    dictionary: tuple[str, ...],
    large_rows: bool,
) -> _Parsed | None:
    """Parse the first ``n`` bytes of ``buf`` (which has room for one byte more); a parse to
    keep (``keep``: the bytes end with a line end) must be proven to end between rows
    (:func:`_parse_closed`). ``None``: not proven, or not parsed (bytes that are not UTF-8...):
    the caller reads the file without the cache."""
    try:
        if keep:
            return _parse_closed(buf, n, header, known, dictionary, large_rows)
        return _parse_plain(
            pa.py_buffer(memoryview(buf)[:n]), header, known, dictionary, large_rows
        )
    except pa.ArrowInvalid:
        return None


def _parse_closed(
    buf: bytearray,
    n: int,
    header: list[str],
    known: set[str],
    dictionary: tuple[str, ...],
    large_rows: bool,
) -> _Parsed | None:
    """Parse the first ``n`` bytes of ``buf`` (ending with a line end; ``buf`` has room for one
    byte more) and prove that the parser ends them between rows, so that bytes appended later
    start a row of their own (``None``: not proven).

    Every line end must end a row (no quoted value holds one) and the last quoted value must be
    closed: one more line end is parsed after the bytes, and it must give a blank row of its own
    (inside an open quote it would be part of a value), which is then taken out again."""
    buf[n] = 0x0A
    view = memoryview(buf)[: n + 1]
    parsed = _parse_plain(pa.py_buffer(view), header, known, dictionary, large_rows)
    ends = buf.count(b"\n", 0, n)
    if buf.find(b"\r", 0, n) >= 0:  # a CR alone ends a line too (CR LF: one line end)
        ends += buf.count(b"\r", 0, n) - buf.count(b"\r\n", 0, n)
    if not (len(parsed.blank) and parsed.blank[-1] == parsed.total + 1 and ends == parsed.total):
        return None
    parsed.total -= 1
    parsed.blank = parsed.blank[:-1]
    return parsed


def _read_into(fh: Any, view: memoryview) -> int:
    """Fill ``view`` from the open file ``fh`` (fewer bytes at its end); the bytes read."""
    got = 0
    while got < len(view):
        k = fh.readinto(view[got:])
        if not k:
            break
        got += k
    return got


def _hash_prefix(fh: Any, n: int, digest: Any) -> None:
    """Feed the first ``n`` bytes of the open file ``fh`` to ``digest``."""
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    left = n
    while left:
        got = fh.readinto(view[: min(left, len(buf))])
        if not got:
            break
        digest.update(view[:got])
        left -= got


_CACHE: contextvars.ContextVar[ParseCache | None] = contextvars.ContextVar(
    "metaprov_parse_cache", default=None
)


@contextlib.contextmanager
def parse_cache(cache: ParseCache | None) -> Iterator[ParseCache | None]:
    """Read CSV files through ``cache`` inside the ``with`` block (``None``: no cache)."""
    token = _CACHE.set(cache)
    try:
        yield cache
    finally:
        _CACHE.reset(token)


@dataclass
class RowSelection:
    """Which rows of a file one reader keeps (one partition of a run's keys).

    Attributes:
        masks: per row of a block (an Arrow table of the file's text columns), whether to keep
            it and whether this reader counts it as read (its own rows: the counts of all the
            readers of a file add up to the file's).
        reports_rest: this reader also counts and reports the rows of no one (malformed and
            blank lines), so each is reported once whichever reader sees it.
    """

    masks: Callable[[pa.Table], tuple[np.ndarray, np.ndarray]]
    reports_rest: bool = False


class _Ignore:
    """Accounting that drops every call (the rows of other readers)."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


def _lines_of(done: int, n: int, skipped: np.ndarray) -> np.ndarray:
    """File lines of the parsed rows ``done .. done+n-1`` (row 0 is line 2), given the sorted
    lines the parser skipped so far (skipped lines beyond these rows do not matter)."""
    i = np.arange(done, done + n, dtype=np.int64)
    before = skipped - np.arange(len(skipped), dtype=np.int64) - 2
    return i + 2 + np.searchsorted(before, i, side="right")


def _read_selected(
    path: Path,
    header: list[str],
    known: set[str],
    dictionary: tuple[str, ...],
    acct: Accounting,
    select: RowSelection,
) -> CsvTable:
    """Read ``path`` block by block, keeping the rows ``select`` keeps (peak memory: the rows
    kept plus a few blocks, not the file).

    Dictionary columns keep every value of the file in their dictionaries (a worker address is
    a worker of the run, whichever reader's rows name it)."""
    name = path.name
    for threads in (True, False):
        bad_rows: list[tuple[int, str]] = []
        opts = _options(header, known, dictionary, bad_rows, threads=threads)
        opts["read_options"] = pacsv.ReadOptions(use_threads=threads, block_size=_BLOCK)
        kept: list[pa.Table] = []
        lines: list[np.ndarray] = []
        blank: list[np.ndarray] = []
        done = counted = 0
        with pacsv.open_csv(path, **opts) as reader:
            for batch in reader:
                t = pa.Table.from_batches([batch])
                n = t.num_rows
                skipped = np.array(sorted(r for r, _ in bad_rows), dtype=np.int64)
                ln = _lines_of(done, n, skipped) if not threads else np.arange(2, n + 2) + done
                done += n
                allnull = np.ones(n, dtype=bool)
                for col in t.columns:
                    allnull &= col.is_null().to_numpy(zero_copy_only=False)
                keep, mine = select.masks(t)
                keep = np.asarray(keep, dtype=bool) & ~allnull
                counted += int(np.count_nonzero(np.asarray(mine, dtype=bool) & ~allnull))
                blank.append(ln[allnull])
                kept.append(t.filter(pa.array(keep)))  # (zero rows keep the dictionaries)
                lines.append(ln[keep])
        if bad_rows and threads:
            continue  # a threaded parse cannot tell the skipped rows' lines: read again
        break
    if select.reports_rest:
        acct.read(name, counted + len(bad_rows) + sum(len(b) for b in blank))
        _drop_malformed(name, bad_rows, acct)
        blanks = np.concatenate(blank) if blank else np.zeros(0, np.int64)
        if len(blanks):
            acct.drop(name, "blank line", blanks)
    else:
        acct.read(name, counted)
    table = pa.concat_tables(kept) if kept else _empty(header, known, dictionary)
    return CsvTable(name, table, np.concatenate(lines) if lines else np.zeros(0, np.int64))


def _empty(header: list[str], known: set[str], dictionary: tuple[str, ...]) -> pa.Table:
    cols = [c for c in header if c in known]
    return pa.table({c: pa.array([], _DICT if c in dictionary else pa.string()) for c in cols})


def _select_after(
    path: Path,
    select: RowSelection,
    acct: Accounting,
    required: list[str],
    optional: list[str],
    extended: tuple[str, ...],
    dictionary: tuple[str, ...],
) -> CsvTable | None:
    """The whole-file read, then the selection (a file the block reader cannot parse)."""
    ct = _read_csv(
        path,
        required=required,
        optional=optional,
        extended=extended,
        dictionary=dictionary,
        acct=acct if select.reports_rest else _Ignore(),
    )
    if ct is None:
        return None
    keep, mine = select.masks(ct.table)
    if select.reports_rest:
        acct.read(path.name, -int(len(ct) - np.count_nonzero(mine)))
    else:
        acct.read(path.name, int(np.count_nonzero(mine)))
    return ct.take(np.asarray(keep, dtype=bool))


def _parse(src: Path | pa.Buffer, opts: dict, bad_rows: list[tuple[int, str]]) -> pa.Table:
    try:
        return pacsv.read_csv(_open(src), **opts)
    except pa.ArrowInvalid as exc:
        if "straddl" not in str(exc):
            raise
    # One row (a whole submitted graph in graph.csv) is larger than a block: retry with a block
    # as large as the file (one block: one thread, exact line numbers).
    bad_rows.clear()
    opts["read_options"] = pacsv.ReadOptions(use_threads=False, block_size=_whole_file(src))
    return pacsv.read_csv(_open(src), **opts)


def _open(src: Path | pa.Buffer) -> Path | pa.BufferReader:
    return pa.BufferReader(src) if isinstance(src, pa.Buffer) else src


def _whole_file(src: Path | pa.Buffer) -> int:
    """A parse block size that holds the whole file (Arrow's limit: 2 GiB)."""
    size = src.size if isinstance(src, pa.Buffer) else src.stat().st_size
    return min(size + 1, 2**31 - 1)


def _finish(
    name: str, table: pa.Table, bad_rows: list[tuple[int, str]], acct: Accounting
) -> CsvTable:
    lines, total = _row_lines(table.num_rows, bad_rows)
    acct.read(name, total)
    _drop_malformed(name, bad_rows, acct)
    return CsvTable(name, table, lines)


def _row_lines(n_out: int, bad_rows: list[tuple[int, str]]) -> tuple[np.ndarray, int]:
    """The 1-based file lines of the ``n_out`` rows a parser returned (the header is line 1;
    the rows it skipped, ``bad_rows``, are not among them) and the rows it saw in all."""
    skipped = np.array(sorted(r for r, _ in bad_rows), dtype=np.int64)
    total = n_out + len(skipped)
    lines = np.setdiff1d(np.arange(2, total + 2, dtype=np.int64), skipped, assume_unique=True)
    return lines[:n_out], total


def _drop_malformed(name: str, bad_rows: list[tuple[int, str]], acct: Accounting) -> None:
    """Account for the rows the parser skipped (line, what was wrong)."""
    if bad_rows:
        acct.drop(
            name,
            "malformed row (wrong number of fields; e.g. truncated)",
            [r for r, _ in bad_rows],
            detail=[d for _, d in bad_rows],
        )


def _drop_blank(ct: CsvTable, acct: Accounting) -> CsvTable:
    """A blank line parses as a row of nulls: not a row of data."""
    if not len(ct):
        return ct
    allnull = np.ones(len(ct), dtype=bool)
    for col in ct.table.columns:
        allnull &= col.is_null().to_numpy(zero_copy_only=False)
    if allnull.any():
        acct.drop(ct.name, "blank line", ct.lines[allnull])
        ct = ct.take(~allnull)
    return ct


def _types_mapper(t: pa.DataType) -> pd.api.extensions.ExtensionDtype | None:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pd.StringDtype("pyarrow", na_value=np.nan)
    return None


def _options(
    header: list[str],
    known: set[str],
    dictionary: tuple[str, ...],
    bad_rows: list[tuple[int, str]],
    *,
    threads: bool,
    block: int | None = None,
) -> dict:
    def on_invalid(row: pacsv.InvalidRow) -> str:
        bad_rows.append(
            (row.number or 0, f"expected {row.expected_columns} fields, found {row.actual_columns}")
        )
        return "skip"

    return {
        # Only a single-threaded parse reports the line number of every skipped row.
        "read_options": pacsv.ReadOptions(
            use_threads=threads and block is None, block_size=block or _BLOCK
        ),
        "parse_options": pacsv.ParseOptions(
            invalid_row_handler=on_invalid, ignore_empty_lines=False
        ),
        "convert_options": pacsv.ConvertOptions(
            column_types={c: (_DICT if c in dictionary else pa.string()) for c in header},
            include_columns=[c for c in header if c in known],
            strings_can_be_null=True,
            null_values=[""],
            quoted_strings_can_be_null=False,
        ),
    }


def _read_with_bad_bytes(
    path: Path, opts: dict, acct: Accounting, bad_rows: list[tuple[int, str]]
) -> CsvTable:
    """Slow path for a file holding non-UTF-8 bytes: find those lines, blank them, read the rest."""
    keep: list[bytes] = []
    bad_lines: list[int] = []
    for i, ln in enumerate(path.read_bytes().split(b"\n")):
        try:
            ln.decode("utf-8")
        except UnicodeDecodeError:
            bad_lines.append(i + 1)
            keep.append(b"")  # keeps the line numbering; the row is dropped below
            continue
        keep.append(ln)
    bad_rows.clear()
    data = b"\n".join(keep)
    try:
        table = pacsv.read_csv(pa.BufferReader(data), **opts)
    except pa.ArrowInvalid as exc:
        if "straddl" not in str(exc):
            raise
        bad_rows.clear()
        opts["read_options"] = pacsv.ReadOptions(
            use_threads=False, block_size=min(len(data) + 1, 2**31 - 1)
        )
        table = pacsv.read_csv(pa.BufferReader(data), **opts)
    ct = _finish(path.name, table, bad_rows, acct)
    is_bad = np.isin(ct.lines, bad_lines)
    acct.drop(path.name, "bytes that are not UTF-8", ct.lines[is_bad], detail="row not used")
    return _drop_blank(ct.take(~is_bad), acct)


def read_csv(path: Path, **kwargs: Any) -> CsvTable | None:
    """Read one CSV file (see :func:`_read_csv` for the arguments and the result).

    Raises:
        InputError: as :func:`_read_csv`, and when the file cannot be read at all (permissions,
            an I/O error) or is sparse (:func:`first_hole`: never expanded), naming the file.

    A row with a field over :data:`MAX_FIELD_BYTES` is not used (counted with its line).
    """
    try:
        _refuse_sparse(path)
        return _drop_huge(_read_csv(path, **kwargs), kwargs["acct"])
    except OSError as exc:
        raise InputError(
            f"cannot read the file: {exc.strerror or exc}",
            path=path,
            hint="check that the file is readable (ls -l; chmod u+r), or move it out of the run",
        ) from exc


def _refuse_sparse(path: Path) -> None:
    """A CSV with a hole (``truncate -s 3G``): its size is not data. Reading it would expand
    gigabytes of zeros in memory; it is refused, naming where the data ends."""
    size = path.stat().st_size
    if size <= _BLOCK:
        return
    hole = first_hole(path, size)
    if hole < size:
        raise InputError(
            f"a sparse file: only its first {hole:,} of {size:,} bytes were ever written (the "
            "rest is a hole of zeros); not read",
            path=path,
            hint="a run's CSV files are written row after row and have no holes: restore the "
            "file, or cut it where its data ends (truncate -s " + str(hole) + ")",
        )


def _drop_huge(ct: CsvTable | None, acct: Accounting) -> CsvTable | None:
    """``ct`` without the rows holding a field over :data:`MAX_FIELD_BYTES` (each counted)."""
    if ct is None or not len(ct):
        return ct
    over = np.zeros(len(ct), dtype=bool)
    for name in ct.columns:
        if name in LIST_COLUMNS:
            continue
        col = ct.table.column(name)
        if _text_bytes(col) <= MAX_FIELD_BYTES:
            continue  # all the column's text is shorter than the limit
        big = _byte_lengths(col) > MAX_FIELD_BYTES
        if big.any():
            acct.drop(
                ct.name,
                f"a field longer than {MAX_FIELD_BYTES:,} bytes",
                ct.lines[big & ~over],
                column=name,
                detail="row not used",
            )
            over |= big
    if not over.any():
        return ct
    kept = ct.take(~over)
    # a dictionary column keeps its values after a filter: the huge one must not live on there
    # (readers take a column's dictionary as its set of values)
    table = kept.table
    for i, name in enumerate(table.column_names):
        col = table.column(i)
        if pa.types.is_dictionary(col.type):
            fresh = col.cast(col.type.value_type).combine_chunks().dictionary_encode()
            table = table.set_column(i, name, fresh.cast(col.type))
    return CsvTable(kept.name, table, kept.lines)


def _text_bytes(col: pa.ChunkedArray) -> int:
    """Bytes of text a column holds (a dictionary column: its dictionaries')."""
    return sum(
        c.dictionary.nbytes if pa.types.is_dictionary(c.type) else c.nbytes for c in col.chunks
    )


def _byte_lengths(col: pa.ChunkedArray) -> np.ndarray:
    """Each value's length in bytes (0 for null), one per row."""
    import pyarrow.compute as pc

    parts = []
    for chunk in col.chunks:
        if pa.types.is_dictionary(chunk.type):
            lengths = pc.binary_length(chunk.dictionary).fill_null(0)
            values = pc.take(lengths, chunk.indices)
        else:
            values = pc.binary_length(chunk)
        parts.append(values.fill_null(0).to_numpy(zero_copy_only=False))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
