"""Deprecated alias of metaprov.synthetic.darshan (moved in metaprov 0.2); import from there."""

import warnings

from metaprov.synthetic.darshan import *  # noqa: F403

warnings.warn(
    "metaprov.ingest.darshan_write moved to metaprov.synthetic.darshan",
    DeprecationWarning,
    stacklevel=2,
)
