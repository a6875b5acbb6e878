"""``worker_transfer.csv`` -> the ``transfers`` table (one row per key moved) and the keys' codes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metaprov.ingest.csvread import CsvTable
from metaprov.ingest.dask_csv.columns import (
    _Clock,
    _Col,
    _decode,
    _enc,
    _float,
    _mapping,
    _sortable,
    _sorted_union,
    _str,
    _us,
    _utc,
)
from metaprov.ingest.dask_csv.order import (
    _first_of_group,
    _na_last,
    _rank_in_runs,
    _row_groups,
    _run_starts,
)
from metaprov.ingest.literals import ParsedArrow, parse_column
from metaprov.records import Accounting, conform
from metaprov.timeutil import NAT_US as _NAT


@dataclass
class _TransferKeys:
    """The key of every transfers row as a code into ``cats``."""

    codes: np.ndarray
    cats: pa.Array


def read_transfers(
    ct: CsvTable, acct: Accounting, clock: _Clock | None = None
) -> tuple[pd.DataFrame, _TransferKeys]:
    """De-duplicate re-sent rows, match the two sides of each transfer, one row per key moved."""
    ct = _drop_resent(ct, acct)
    ct, typ = _known_types(ct, acct)
    parsed = _parse_keys(ct, acct)
    n = len(ct)
    good = np.ones(n, dtype=bool)
    good[parsed.bad_cells] = False
    incoming = typ.is_in(("incoming_transfer",))
    ends = _endpoints(ct, incoming)
    ks = _key_sets(parsed, n)
    start, stop, good = _times(ct, acct, clock, good)
    num = {c: _float(ct, c, acct) for c in ("duration", "total", "bandwidth", "compressed")}
    pairs = _pair_sides(good, incoming, ends, ks, start)
    return _per_key(parsed, ks, pairs, ends, start, stop, num, n)


#: The columns that make two rows the same log entry (all but ``time``).
_CONTENT = (
    "start",
    "stop",
    "middle",
    "duration",
    "keys",
    "total",
    "bandwidth",
    "who",
    "type",
    "called_from",
    "compressed",
)


def _drop_resent(ct: CsvTable, acct: Accounting) -> CsvTable:
    """Drop the rows identical to an earlier one but for ``time`` (a re-sent log entry)."""
    content = [c for c in _CONTENT if c in ct.columns]
    dup = ~_first_of_group(_row_groups([_enc(ct, c).codes for c in content]))
    if dup.any():
        acct.drop(ct.name, "duplicate (re-sent log entry; identical but for 'time')", ct.lines[dup])
        ct = ct.take(~dup)
    return ct


def _known_types(ct: CsvTable, acct: Accounting) -> tuple[CsvTable, _Col]:
    """Drop the rows whose ``type`` is neither incoming nor outgoing; the ``type`` column."""
    typ = _enc(ct, "type")
    known_type = typ.is_in(("incoming_transfer", "outgoing_transfer"))
    if (~known_type).any():
        unknown = typ.take(np.flatnonzero(~known_type)).arrow()
        acct.drop(
            ct.name,
            "unknown transfer type",
            ct.lines[~known_type],
            column="type",
            detail=[str(x) if x is not None else "nan" for x in unknown.to_pylist()],
        )
        ct = ct.take(known_type)
        typ = _enc(ct, "type")
    return ct, typ


def _parse_keys(ct: CsvTable, acct: Accounting) -> ParsedArrow:
    """The ``keys`` literals ({key: nbytes}) parsed; malformed cells counted."""
    parsed = parse_column(ct.arrow("keys"), "dict_int")
    if len(parsed.bad_cells):
        acct.drop(
            ct.name,
            "malformed 'keys' literal",
            ct.lines[parsed.bad_cells],
            column="keys",
            detail=parsed.bad_detail,
        )
    return parsed


@dataclass
class _Endpoints:
    """Source and destination of each row as codes into one sorted address dictionary."""

    addrs: pa.Array
    empty: int  # the code of "" (a missing address: a client)
    source: np.ndarray
    destination: np.ndarray


def _endpoints(ct: CsvTable, incoming: np.ndarray) -> _Endpoints:
    # The logger is the receiver of an incoming row and the sender of an outgoing one.
    logger, peer = _enc(ct, "called_from"), _enc(ct, "who")
    addrs = _sorted_union(pa.array([""]), logger.cats, peer.cats)
    empty = int(pc.index(addrs, "").as_py())
    lg = _mapping(logger.cats, addrs)[logger.codes]
    pe = _mapping(peer.cats, addrs)[peer.codes]
    lg, pe = np.where(lg < 0, empty, lg), np.where(pe < 0, empty, pe)
    return _Endpoints(addrs, empty, np.where(incoming, pe, lg), np.where(incoming, lg, pe))


@dataclass
class _KeySets:
    """The keys of the rows (dictionary codes) and each row's key-set signature."""

    cats: pa.Array
    codes: np.ndarray  # per parsed item
    sig: np.ndarray  # per row: sum of the 64-bit hashes of its keys
    nkeys: np.ndarray  # per row


def _key_sets(parsed: ParsedArrow, n: int) -> _KeySets:
    """The key set of a row, order-independent, to pair an incoming side with its outgoing side:
    a sum of 64-bit key hashes and the key count (collisions are negligible at 2**-64)."""
    kenc = pc.dictionary_encode(parsed.key)
    kcats, kcodes = kenc.dictionary, kenc.indices.to_numpy(zero_copy_only=False)
    khash = pd.util.hash_array(
        kcats.to_numpy(zero_copy_only=False).astype(object), categorize=False
    )
    sig = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        np.add.at(sig, parsed.cell, khash[kcodes])
    return _KeySets(kcats, kcodes, sig, np.bincount(parsed.cell, minlength=n))


def _times(
    ct: CsvTable, acct: Accounting, clock: _Clock | None, good: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``start`` and ``stop`` (µs); rows without a start dropped, a stop before the start
    treated as absent (counted)."""
    name = ct.name
    start, stop = _us(ct, "start", acct, clock), _us(ct, "stop", acct, clock)
    nostart = good & (start == _NAT)
    if nostart.any():
        acct.drop(name, "no usable 'start' time", ct.lines[nostart], column="start")
        good = good & ~nostart
    backwards = good & (stop != _NAT) & (stop < start)
    if backwards.any():
        idx = np.flatnonzero(backwards)
        acct.warn(
            name,
            f"'stop' before 'start' (stop treated as absent) x{len(idx)}",
            line=int(ct.lines[idx[0]]),
            column="stop",
        )
        stop = np.where(backwards, _NAT, stop)
    return start, stop, good


@dataclass
class _Pairs:
    """One transfer per matched pair of sides (or lone side), in (start, src, dst) order."""

    pick: np.ndarray  # the row whose figures are kept (the incoming side's when logged)
    comp_row: np.ndarray  # the row giving the compressed size (only the sender logs it)
    src: np.ndarray  # address codes, -1: none
    dst: np.ndarray
    logged: np.ndarray  # "both", "incoming" or "outgoing"


def _pair_sides(
    good: np.ndarray, incoming: np.ndarray, ends: _Endpoints, ks: _KeySets, start: np.ndarray
) -> _Pairs:
    """Pair the k-th incoming row with the k-th outgoing row of the same (source, destination,
    key set), each side ranked by (start, row)."""
    rows = np.flatnonzero(good)
    inc = incoming[rows]
    match = [ends.source[rows], ends.destination[rows], ks.sig[rows], ks.nkeys[rows]]
    o = np.lexsort((rows, _sortable(start[rows]), *reversed(match), inc))
    rank = np.empty(len(rows), dtype=np.int64)
    rank[o] = _rank_in_runs(_run_starts(inc[o], *(m[o] for m in match)))
    side = pd.DataFrame({"src": match[0], "dst": match[1], "sig": match[2], "nk": match[3]})
    side["rank"], side["row"] = rank, rows
    m = side[inc].merge(
        side[~inc], on=["src", "dst", "sig", "nk", "rank"], how="outer", suffixes=("_in", "_out")
    )
    has_in = m["row_in"].notna().to_numpy()
    has_out = m["row_out"].notna().to_numpy()
    r_in = m["row_in"].fillna(-1).to_numpy(dtype=np.int64)
    r_out = m["row_out"].fillna(-1).to_numpy(dtype=np.int64)
    pick = np.where(has_in, r_in, r_out)
    comp_row = np.where(has_out, r_out, r_in)
    src = m["src"].to_numpy(dtype=np.int64)
    dst = m["dst"].to_numpy(dtype=np.int64)
    src, dst = np.where(src == ends.empty, -1, src), np.where(dst == ends.empty, -1, dst)
    order = np.lexsort((pick, _na_last(dst), _na_last(src), _sortable(start[pick])))
    logged = np.where(has_in & has_out, "both", np.where(has_in, "incoming", "outgoing"))
    return _Pairs(pick[order], comp_row[order], src[order], dst[order], logged[order])


def _per_key(
    parsed: ParsedArrow,
    ks: _KeySets,
    p: _Pairs,
    ends: _Endpoints,
    start: np.ndarray,
    stop: np.ndarray,
    num: dict[str, np.ndarray],
    n: int,
) -> tuple[pd.DataFrame, _TransferKeys]:
    """One row per key moved, by transfer then key text."""
    pos = np.full(n, -1, dtype=np.int64)
    pos[p.pick] = np.arange(len(p.pick))
    it = pos[parsed.cell]
    keep = np.flatnonzero(it >= 0)
    kcats, kcodes = ks.cats, ks.codes
    krank = np.empty(len(kcats), dtype=np.int64)
    krank[pc.sort_indices(kcats).to_numpy()] = np.arange(len(kcats))
    items = keep[np.lexsort((krank[kcodes[keep]], it[keep]))]
    t = it[items]
    rowsel = p.pick[t]
    nbytes = np.rint(parsed.value.to_numpy(zero_copy_only=False)[items])
    out = pd.DataFrame(
        {
            "transfer": t,
            "key": _str(kcats.take(pa.array(kcodes[items]))),
            "nbytes": pd.array(nbytes).round().astype("Int64"),
            "source": _str(_decode(ends.addrs, p.src[t])),
            "destination": _str(_decode(ends.addrs, p.dst[t])),
            "start": _utc(start[rowsel]),
            "stop": _utc(stop[rowsel]),
            "duration": num["duration"][rowsel],
            "total": pd.array(num["total"][rowsel]).round().astype("Int64"),
            "bandwidth": num["bandwidth"][rowsel],
            "compressed": pd.array(num["compressed"][p.comp_row[t]]).round().astype("Int64"),
            "n_keys": ks.nkeys[rowsel],
            "logged_by": p.logged[t],
        }
    )
    return conform("transfers", out), _TransferKeys(kcodes[items], kcats)
