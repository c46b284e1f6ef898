"""The site's timestamps: UTC, ISO 8601 to the millisecond, ``Z`` for the zone
(``2024-05-01T12:00:00.123Z``), as the audit log, the access log, the privacy ledger, the cut
history and the Opal command list write them."""

from __future__ import annotations

from datetime import datetime, timezone


def utc_now() -> str:
    """The current UTC time as ISO 8601 with milliseconds and a ``Z`` suffix."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
