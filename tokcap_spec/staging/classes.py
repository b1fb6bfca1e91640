"""Which classes a staging exchange speaks: tokcap's own, NeMo Gym 0.7.0's, or another module's.

The staging records are one wire format with more than one set of classes. NeMo Gym's capture
hands a sink its own ``StagedCallRecord`` and refuses any answer that is not an instance of its
own ``StageResult``; its ``verify_and_linearize`` takes only its own ``StagedCallBaseSnapshot``
rows. A set of classes is named by the module that defines all three:

- ``"tokcap"``: :mod:`tokcap_spec.staging.records`;
- ``"gym"``: ``nemo_gym.token_id_capture.staging.records`` (NeMo Gym 0.7.0; it must be
  importable where the name is used);
- any other module path holding classes of those three names.

:class:`WireClasses` carries a record, a result or a row across into its set by the wire
fields alone, so a value is the same call whichever set it is built in.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

__all__ = [
    "GYM",
    "GYM_RECORDS",
    "TOKCAP",
    "WireClasses",
    "WireClassesError",
    "wire_classes",
    "wire_classes_of",
]

TOKCAP = "tokcap"
"""The name of tokcap_spec's own classes, the default everywhere."""
GYM = "gym"
"""The name of NeMo Gym 0.7.0's classes."""
GYM_RECORDS = "nemo_gym.token_id_capture.staging.records"
"""The module NeMo Gym 0.7.0 defines its staging records in."""

_MODULES = {TOKCAP: "tokcap_spec.staging.records", GYM: GYM_RECORDS}
_CLASS_NAMES = ("StagedCallRecord", "StagedCallBaseSnapshot", "StageResult")


class WireClassesError(ValueError):
    """A name that does not lead to a module holding the three staging classes."""


@dataclass(frozen=True)
class WireClasses:
    """The record, row and result classes of one module, and the name they were asked by."""

    name: str
    module: str
    record: type[BaseModel]
    base_snapshot: type[BaseModel]
    result: type[BaseModel]

    @property
    def is_tokcap(self) -> bool:
        """Whether these are tokcap_spec's own classes."""
        return self.module == _MODULES[TOKCAP]

    def describe(self, kind: str = "result") -> str:
        """The qualified name of one class of the set, for messages: ``module.Class``."""
        cls = {"record": self.record, "row": self.base_snapshot, "result": self.result}[kind]
        return f"{cls.__module__}.{cls.__qualname__}"

    def record_of(self, record: Any) -> Any:
        """``record`` as an instance of this set's record class, by its wire fields.

        A record that validates is validated into the class; one that does not (a check's
        deliberately broken record, built without validation) is built unvalidated, exactly as
        broken. Anything that is not a pydantic model (``None``, a dict) is returned as it is.
        """
        if isinstance(record, self.record) or not isinstance(record, BaseModel):
            return record
        return _carried(self.record, dict(vars(record)))

    def result_of(self, result: Any) -> BaseModel:
        """A stage result as an instance of this set's result class, validated."""
        if isinstance(result, self.result):
            return result
        fields = {name: getattr(result, name, None) for name in ("ok", "staging_key", "error")}
        return self.result.model_validate(fields)

    def row_of(self, row: Any) -> BaseModel:
        """A fetched row as an instance of this set's row class, validated (its digest too)."""
        if isinstance(row, self.base_snapshot):
            return row
        fields = dict(vars(row)) if isinstance(row, BaseModel) else dict(row)
        fields.pop("extras", None)
        return self.base_snapshot.model_validate(fields)


def _carried(cls: type[BaseModel], fields: dict[str, Any]) -> BaseModel:
    try:
        return cls.model_validate(fields)
    except ValidationError:
        return cls.model_construct(**fields)


_LOADED: dict[str, WireClasses] = {}
_LOCK = threading.Lock()


def wire_classes(name: str = TOKCAP) -> WireClasses:
    """The classes ``name`` stands for: ``"tokcap"``, ``"gym"`` or a module path.

    Raises :class:`WireClassesError` saying what is missing when the module cannot be imported
    or lacks one of ``StagedCallRecord``, ``StagedCallBaseSnapshot`` and ``StageResult``.
    """
    if not isinstance(name, str) or not name:
        raise WireClassesError(f"staging classes are named by a non-empty string, got {name!r}")
    with _LOCK:
        if name not in _LOADED:
            _LOADED[name] = _load(name)
        return _LOADED[name]


def _load(name: str) -> WireClasses:
    module_name = _MODULES.get(name, name)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        where = " (install nemo-gym 0.7.0 where the classes are used)" if name == GYM else ""
        raise WireClassesError(
            f"staging classes {name!r}: module {module_name!r} cannot be imported{where}: {exc}"
        ) from None
    found = {attribute: getattr(module, attribute, None) for attribute in _CLASS_NAMES}
    missing = [
        attribute
        for attribute, cls in found.items()
        if not (isinstance(cls, type) and issubclass(cls, BaseModel))
    ]
    if missing:
        raise WireClassesError(
            f"staging classes {name!r}: module {module_name!r} has no pydantic model "
            f"{', '.join(missing)}; name 'tokcap', 'gym' or a module defining "
            f"{', '.join(_CLASS_NAMES)}"
        )
    return WireClasses(
        name,
        module_name,
        found["StagedCallRecord"],  # type: ignore[arg-type]
        found["StagedCallBaseSnapshot"],  # type: ignore[arg-type]
        found["StageResult"],  # type: ignore[arg-type]
    )


def wire_classes_of(record: object) -> WireClasses | None:
    """The set of classes whose record class ``record`` is an instance of, or None.

    The module of the record's class (or of a class it derives from) must define all three
    staging classes, as tokcap_spec's and NeMo Gym's record modules do.
    """
    for cls in type(record).__mro__:
        if cls.__name__ != "StagedCallRecord":
            continue
        try:
            classes = wire_classes(cls.__module__)
        except WireClassesError:
            continue
        if isinstance(record, classes.record):
            return classes
    return None
