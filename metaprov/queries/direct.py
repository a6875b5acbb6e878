"""Direct forms of packaged questions: the answer computed from the runs' records.

Input: the records of the runs (as :func:`metaprov.queries.fromruns.query_runs` reads them) and
the question's parameters. Output: the same DataFrame the question's SPARQL gives on a store
holding those runs. A direct form exists only where the store path is too slow for a large run;
``tests/integration/test_query_runs.py`` asks every question both ways and compares the bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from metaprov.records import RunRecords


class DirectUnsupported(Exception):
    """The direct form does not cover these parameters or runs: the store path answers."""


Form = Callable[[Sequence["RunRecords"], dict[str, Any], "str | None"], pd.DataFrame]

#: Question name -> its direct form.
FORMS: dict[str, Form] = {}

__all__ = ["FORMS", "DirectUnsupported"]
