"""Built-in estimators, one family per module. Importing this package registers them; the library
adapters (`bt_core.estimators.adapters`) register only where their library is installed."""

from bt_core.estimators import (  # noqa: F401
    adapters,
    cosine,
    dot,
    fluency,
    local_buffer,
    norm_only,
    oracle,
    random,
    tracincp,
    trak,
)
