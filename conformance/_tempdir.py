"""The target's temporary files inside the run's basetemp, where pytest's retention removes them.

``TMPDIR`` (with ``TMP`` and ``TEMP``) and ``tempfile``'s default directory point into the run's
scratch directory from before the kit first builds the target until the run ends, so that
``tempfile.mkdtemp()`` in the target, in this process or in a spawned worker (which inherits
the environment), leaves nothing in the system's temporary directory.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["redirect"]

_NAMES = ("TMPDIR", "TMP", "TEMP")


def redirect(folder: Path) -> Callable[[], None]:
    """Make ``folder`` every temporary file's default place; return what restores the last."""
    before_env = {name: os.environ.get(name) for name in _NAMES}
    before = tempfile.tempdir
    for name in _NAMES:
        os.environ[name] = str(folder)
    tempfile.tempdir = str(folder)

    def restore() -> None:
        for name, value in before_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        tempfile.tempdir = before

    return restore
