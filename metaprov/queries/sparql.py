"""Deprecated alias of metaprov.store.sparql (moved in metaprov 0.2); import from there."""

import warnings

from metaprov.store.sparql import *  # noqa: F403

warnings.warn(
    "metaprov.queries.sparql moved to metaprov.store.sparql",
    DeprecationWarning,
    stacklevel=2,
)
