"""Deprecated alias of metaprov.analysis.critical_path and metaprov.queries.critical_path (moved in metaprov 0.2); import from there."""

import warnings

from metaprov.analysis.critical_path import *  # noqa: F403
from metaprov.queries.critical_path import *  # noqa: F403
from metaprov.queries.critical_path import QUESTION, critical_path_from_store, resolve_run  # noqa: F401

warnings.warn(
    "metaprov.critical_path moved to metaprov.analysis.critical_path and metaprov.queries.critical_path",
    DeprecationWarning,
    stacklevel=2,
)
