"""Arrow schemas of the kept layers other than trajectories: raw records and quarantine."""

from __future__ import annotations

import pyarrow as pa

RAW_SCHEMA = pa.schema(
    [
        ("uri", pa.string()),
        ("locator", pa.string()),
        ("format", pa.string()),
        ("payload", pa.string()),
    ]
)

QUARANTINE_SCHEMA = pa.schema(
    [
        ("uri", pa.string()),
        ("locator", pa.string()),
        ("format", pa.string()),
        ("stage", pa.string()),
        ("reason", pa.string()),
        ("detail", pa.string()),
    ]
)
