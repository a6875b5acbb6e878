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
from metaprov.ingest.literals import parse_column
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
    name = ct.name
    content = [
        c
        for c in (
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
        if c in ct.columns
    ]
    dup = ~_first_of_group(_row_groups([_enc(ct, c).codes for c in content]))
    if dup.any():
        acct.drop(name, "duplicate (re-sent log entry; identical but for 'time')", ct.lines[dup])
        ct = ct.take(~dup)
    typ = _enc(ct, "type")
    known_type = typ.is_in(("incoming_transfer", "outgoing_transfer"))
    if (~known_type).any():
        unknown = typ.take(np.flatnonzero(~known_type)).arrow()
        acct.drop(
            name,
            "unknown transfer type",
            ct.lines[~known_type],
            column="type",
            detail=[str(x) if x is not None else "nan" for x in unknown.to_pylist()],
        )
        ct = ct.take(known_type)
        typ = _enc(ct, "type")
    parsed = parse_column(ct.arrow("keys"), "dict_int")
    if len(parsed.bad_cells):
        acct.drop(
            name,
            "malformed 'keys' literal",
            ct.lines[parsed.bad_cells],
            column="keys",
            detail=parsed.bad_detail,
        )
    n = len(ct)
    good = np.ones(n, dtype=bool)
    good[parsed.bad_cells] = False
    incoming = typ.is_in(("incoming_transfer",))
    # Addresses: one sorted dictionary for both columns; "" stands for a missing one (a client).
    logger, peer = _enc(ct, "called_from"), _enc(ct, "who")
    addrs = _sorted_union(pa.array([""]), logger.cats, peer.cats)
    empty = int(pc.index(addrs, "").as_py())
    lg = _mapping(logger.cats, addrs)[logger.codes]
    pe = _mapping(peer.cats, addrs)[peer.codes]
    lg, pe = np.where(lg < 0, empty, lg), np.where(pe < 0, empty, pe)
    source, destination = np.where(incoming, pe, lg), np.where(incoming, lg, pe)
    # The key set of a row, order-independent, to pair an incoming side with its outgoing side:
    # a sum of 64-bit key hashes and the key count (collisions are negligible at 2**-64).
    kenc = pc.dictionary_encode(parsed.key)
    kcats, kcodes = kenc.dictionary, kenc.indices.to_numpy(zero_copy_only=False)
    khash = pd.util.hash_array(
        kcats.to_numpy(zero_copy_only=False).astype(object), categorize=False
    )
    sig = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        np.add.at(sig, parsed.cell, khash[kcodes])
    nkeys = np.bincount(parsed.cell, minlength=n)
    start, stop = _us(ct, "start", acct, clock), _us(ct, "stop", acct, clock)
    nostart = good & (start == _NAT)
    if nostart.any():
        acct.drop(name, "no usable 'start' time", ct.lines[nostart], column="start")
        good &= ~nostart
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
    num = {c: _float(ct, c, acct) for c in ("duration", "total", "bandwidth", "compressed")}

    # rank of each row among the rows of its side with the same match key, by (start, row)
    rows = np.flatnonzero(good)
    inc = incoming[rows]
    match = [source[rows], destination[rows], sig[rows], nkeys[rows]]
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
    pick = np.where(has_in, r_in, r_out)  # the row whose figures are kept
    comp_row = np.where(has_out, r_out, r_in)  # only the sender logs the compressed size
    src = m["src"].to_numpy(dtype=np.int64)
    dst = m["dst"].to_numpy(dtype=np.int64)
    src, dst = np.where(src == empty, -1, src), np.where(dst == empty, -1, dst)
    order = np.lexsort((pick, _na_last(dst), _na_last(src), _sortable(start[pick])))
    pick, comp_row, src, dst = pick[order], comp_row[order], src[order], dst[order]
    logged = np.where(has_in & has_out, "both", np.where(has_in, "incoming", "outgoing"))[order]
    # one row per key moved, by transfer then key text
    pos = np.full(n, -1, dtype=np.int64)
    pos[pick] = np.arange(len(pick))
    it = pos[parsed.cell]
    keep = np.flatnonzero(it >= 0)
    krank = np.empty(len(kcats), dtype=np.int64)
    krank[pc.sort_indices(kcats).to_numpy()] = np.arange(len(kcats))
    items = keep[np.lexsort((krank[kcodes[keep]], it[keep]))]
    t = it[items]
    rowsel = pick[t]
    nbytes = np.rint(parsed.value.to_numpy(zero_copy_only=False)[items])
    out = pd.DataFrame(
        {
            "transfer": t,
            "key": _str(kcats.take(pa.array(kcodes[items]))),
            "nbytes": pd.array(nbytes).round().astype("Int64"),
            "source": _str(_decode(addrs, src[t])),
            "destination": _str(_decode(addrs, dst[t])),
            "start": _utc(start[rowsel]),
            "stop": _utc(stop[rowsel]),
            "duration": num["duration"][rowsel],
            "total": pd.array(num["total"][rowsel]).round().astype("Int64"),
            "bandwidth": num["bandwidth"][rowsel],
            "compressed": pd.array(num["compressed"][comp_row[t]]).round().astype("Int64"),
            "n_keys": nkeys[rowsel],
            "logged_by": logged[t],
        }
    )
    return conform("transfers", out), _TransferKeys(kcodes[items], kcats)
