"""The catalog of mutants: every broken store in the ``zoo_*`` modules and the clause it breaks.

Each mutant is a class with a ``breaks`` attribute naming one clause, an optional ``flags``
tuple of kit options it is judged with, and a docstring that says what it breaks and how a
real transport ends up like that. Correct stores are listed in :data:`CORRECT`.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CORRECT", "HERE", "KIT_GAPS", "MODULES", "Mutant", "Target", "mutants"]

HERE = Path(__file__).resolve().parent
"""The directory that must be on ``PYTHONPATH`` for the kit to import the mutants."""

MODULES = (
    "zoo_shape",
    "zoo_build",
    "zoo_spawn",
    "zoo_put",
    "zoo_freeze",
    "zoo_fence",
    "zoo_drop",
    "zoo_mask",
    "zoo_close",
    "zoo_ext",
)

ROOT_KWARGS = '{"root": "{tmp_path}"}'

KIT_GAPS: dict[str, str] = {}
"""Mutants the kit does not catch under their clause yet, with the check that needs work."""


@dataclass(frozen=True)
class Target:
    """One kit run: the store, its kwargs and the flags it is judged with."""

    name: str
    sink: str
    flags: tuple[str, ...] = ()
    kwargs: str | None = ROOT_KWARGS

    def arguments(self, report: str) -> list[str]:
        """Return the kit's command-line arguments for this target, writing ``report``."""
        arguments = ["-p", "no:cacheprovider", "-p", "zoo_fast", f"--tokcap-sink={self.sink}"]
        if self.kwargs is not None:
            arguments.append(f"--tokcap-sink-kwargs={self.kwargs}")
        return [*arguments, *self.flags, f"--tokcap-report={report}"]


@dataclass(frozen=True)
class Mutant(Target):
    """A store that breaks exactly one promise."""

    clause: str = ""
    story: str = ""

    @property
    def kit_gap(self) -> str:
        """Why the kit misses this mutant today, or ``""`` when it catches it."""
        return KIT_GAPS.get(self.name, "")


CORRECT = (
    Target("BaseStore", "base:BaseStore", ("--tokcap-fence=strict",)),
    Target(
        "MemoryTokenStore",
        "reference.memory_store:MemoryTokenStore",
        ("--tokcap-capability=process-local", "--tokcap-fence=strict"),
        kwargs=None,
    ),
    Target("FileTokenStore", "reference.file_store:FileTokenStore", ("--tokcap-fence=strict",)),
)
"""Stores that must pass the whole kit with no failed clause."""


def mutants() -> list[Mutant]:
    """Import every zoo module and return its mutants, in module and definition order."""
    found = []
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        classes = [
            value
            for value in vars(module).values()
            if inspect.isclass(value)
            and value.__module__ == module_name
            and "breaks" in vars(value)
        ]
        classes.sort(key=lambda cls: inspect.getsourcelines(cls)[1])
        for cls in classes:
            doc = inspect.getdoc(cls) or ""
            summary = doc.splitlines()[0] if doc else ""
            found.append(
                Mutant(
                    name=cls.__name__,
                    sink=f"{module_name}:{cls.__name__}",
                    flags=tuple(getattr(cls, "flags", ())),
                    clause=cls.breaks,
                    story=summary.split(": ", 1)[-1],
                )
            )
    return found
