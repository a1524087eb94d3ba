"""Built-in estimators, one family per module. Importing this package registers them; the library
adapters (`bt_core.attribution.adapters`) register only where their library is installed."""

from bt_core.attribution.estimators import (  # noqa: F401
    cosine,
    dot,
    fluency,
    ladder,
    local_buffer,
    metagrad,
    norm_only,
    oracle,
    random,
    tracin_adam,
    tracincp,
    trak,
)
