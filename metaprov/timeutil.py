"""Time conversions shared by every stage.

All times in metaprov tables are ``datetime64[us, UTC]``: float epoch seconds from the inputs are
rounded to integer microseconds exactly once, here, so every output path prints the same digits.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

UTC_US = pd.DatetimeTZDtype(unit="us", tz="UTC")

#: Largest |epoch seconds| taken as a time: beyond it, microseconds overflow int64 (1e300).
MAX_EPOCH_S = 9.0e12


def epoch_to_utc(values: pd.Series | np.ndarray) -> pd.Series:
    """Convert float epoch seconds (NaN allowed) to ``datetime64[us, UTC]``, rounding once to µs.

    Values that are not finite, or too large to be a time (:data:`MAX_EPOCH_S`), become NaT:
    callers that read user files report them (see ``metaprov.ingest.dask_csv``).
    """
    arr = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(
        dtype="float64", na_value=np.nan
    )
    ok = np.isfinite(arr) & (np.abs(arr) < MAX_EPOCH_S)  # beyond: int64 µs would overflow
    us = np.zeros(len(arr), dtype="int64")
    us[ok] = np.rint(arr[ok] * 1e6).astype("int64")
    out = pd.Series(us.view("datetime64[us]"), copy=False)
    out[~ok] = pd.NaT
    return out.dt.tz_localize("UTC")


#: "No time" in int64 microseconds: what :func:`utc_to_us` makes of NaT.
NAT_US = np.iinfo(np.int64).min


def utc_to_us(values: pd.Series) -> np.ndarray:
    """Integer microseconds since the epoch (NaT becomes :data:`NAT_US`)."""
    return values.to_numpy(dtype="datetime64[us]").view("int64")


def utc_to_epoch(values: pd.Series) -> np.ndarray:
    """Float epoch seconds (NaN for NaT)."""
    us = values.to_numpy(dtype="datetime64[us]")
    out = us.view("int64").astype("float64") / 1e6
    out[np.isnat(us)] = np.nan
    return out


def xsd_datetime(values: pd.Series | np.ndarray) -> np.ndarray:
    """Format UTC times as ``xsd:dateTime`` lexical forms ``YYYY-MM-DDTHH:MM:SS.ffffffZ``.

    NaT becomes an empty string, which callers must skip.
    """
    if isinstance(values, pd.Series):
        arr = values.to_numpy(dtype="datetime64[us]")
    else:
        arr = np.asarray(values).astype("datetime64[us]")
    text = np.char.add(np.datetime_as_string(arr, unit="us"), "Z").astype(object)
    text[np.isnat(arr)] = ""
    return text


def format_utc(value: pd.Timestamp | None) -> str | None:
    """One timestamp as xsd:dateTime text (or None)."""
    if value is None or pd.isna(value):
        return None
    return str(xsd_datetime(np.array([value.to_datetime64()]))[0])
