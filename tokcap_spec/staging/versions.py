"""The three version numbers of NeMo Gym 0.7.0's staging layout.

Each is written into what it versions: the schema and digest versions into every staged record
and into the bytes its digest covers, the extras version into the bytes the extras digest covers.
A record or a digest call that names any other version is refused, never read as this one.
"""

from __future__ import annotations

from typing import Final

__all__ = ["EXTRAS_DIGEST_VERSION", "STAGING_DIGEST_VERSION", "STAGING_SCHEMA_VERSION"]

STAGING_SCHEMA_VERSION: Final = 2
"""The shape of the staging wire records: their fields and the rules between them."""

STAGING_DIGEST_VERSION: Final = 2
"""The byte layout the digest of a staged call is computed over."""

EXTRAS_DIGEST_VERSION: Final = 1
"""The typed byte layout the digest of a call's extras is computed over."""
