"""What the header says about where the run writes: reports, folders it makes, real stores.

Nothing the run writes outside pytest's basetemp happens without a line here first.
"""

from __future__ import annotations

from pathlib import Path

from conformance._settings import KitSettings

__all__ = ["REAL_STORE", "header_notices"]

REAL_STORE = (
    "judging the real store the Gym config names, where it points (--tokcap-allow-real-store): "
    "the kit's test rollouts, ids starting 'tk-' and unique to this run, stay in it"
)


def header_notices(settings: KitSettings, collect_only: bool) -> list[str]:
    """The header's lines about the reports and the store; empty when there is nothing to say."""
    reports = [
        (flag, path)
        for flag, path in (
            ("--tokcap-report", settings.report),
            ("--tokcap-report-md", settings.report_md),
        )
        if path is not None
    ]
    lines = []
    if collect_only:
        lines += [
            f"tokcap: {flag}: --collect-only runs no check, so {path} is not written"
            for flag, path in reports
        ]
    else:
        lines += [
            f"tokcap: {flag}: the folder {path.parent} does not exist; it is created for "
            f"{path.name}"
            for flag, path in reports
            if not Path(path).parent.exists()
        ]
    if settings.real_store:
        lines.append(f"tokcap: {REAL_STORE}")
    return lines
