"""BUILD mutants: constructors that cache, substitute or leak what they were given."""

from __future__ import annotations

from typing import Any, ClassVar

from base import BaseStore

_INSTANCES: dict[str, CachedInstance] = {}


class CachedInstance(BaseStore):
    """BUILD-1: building the sink twice with the same kwargs returns the same object.

    The constructor memoizes instances per root to share one connection pool, so every
    serving component (and every close) acts on one shared object.
    """

    breaks: ClassVar[str] = "BUILD-1"

    def __new__(cls, root: str) -> CachedInstance:
        if root not in _INSTANCES:
            _INSTANCES[root] = super().__new__(cls)
        return _INSTANCES[root]


class SubstitutingFactory(BaseStore):
    """BUILD-1: the named class builds and returns an instance of another class.

    A facade class picks "the best backend" in ``__new__`` and hands back that backend, so the
    object the config built is not the class the config names.
    """

    breaks: ClassVar[str] = "BUILD-1"

    def __new__(cls, root: str) -> Any:
        return BaseStore(root)


class LeaksKwargsInMessage(BaseStore):
    """BUILD-2: an unknown option is refused with an error that prints every kwarg value.

    ``raise TypeError(f"unexpected options {options}")`` is the usual way a Redis password or
    an API token ends up in a startup log.
    """

    breaks: ClassVar[str] = "BUILD-2"

    def __init__(self, root: str, **options: Any) -> None:
        if options:
            raise TypeError(f"unexpected options {options!r}")
        super().__init__(root)


class LeaksKwargsInArgs(BaseStore):
    """BUILD-2: an unknown option is refused with the kwargs carried as an exception argument.

    The message itself looks clean, but ``str(exc)`` of a multi-argument exception shows every
    argument, the kwargs dict included.
    """

    breaks: ClassVar[str] = "BUILD-2"

    def __init__(self, root: str, **options: Any) -> None:
        if options:
            raise ValueError("unexpected options", options)
        super().__init__(root)


class RefusesOptionsAtFirstUse(BaseStore):
    """BUILD-2: options are kept as given and checked at the first write, not at construction.

    Construction stays cheap and never fails, so an unknown option surfaces as an error in a
    serving process's first put, mid-rollout, instead of at startup.
    """

    breaks: ClassVar[str] = "BUILD-2"

    def __init__(self, root: str, **options: Any) -> None:
        super().__init__(root)
        self._options = options

    def write(self, entry: Any) -> None:
        if self._options:
            raise TypeError(f"unsupported options: {', '.join(sorted(self._options))}")
        super().write(entry)
