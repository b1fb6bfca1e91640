"""Every channel pytest has for text, with the run's secrets masked (:mod:`conformance._secrecy`).

Test reports (tracebacks, captured output, properties) are masked where they are made
(:func:`conformance._pytest_wing.verdict.scrub_report`). What reaches the terminal or a file another
way is masked here: warnings (the target's own, and pytest's warnings about exceptions raised in
threads and ``__del__``), records of the ``logging`` handlers pytest installs (live, file,
captured), exceptions in threads and unraisable ones as the interpreter's hooks see them, the
message of an interrupt, and what is written to the file descriptors 1 and 2 of this process or its
children while the kit builds the target before any test runs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

from conformance._secrecy import scrub

__all__ = [
    "fd_output_masked",
    "mask_exception",
    "mask_hooks",
    "mask_logging",
    "mask_warning",
]


def mask_warning(message: warnings.WarningMessage) -> None:
    """Mask the text of a recorded warning before any reporter reads it."""
    text = str(message.message)
    masked = scrub(text)
    if masked != text:
        category = message.category
        try:
            message.message = category(masked)
        except Exception:  # a category that cannot be built from a text
            message.message = UserWarning(masked)


def mask_exception(exc: BaseException | None) -> None:
    """Mask the arguments and notes of ``exc`` and of every exception chained to it."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        with contextlib.suppress(Exception):
            exc.args = tuple(scrub(a) if isinstance(a, str) else _masked(a) for a in exc.args)
        notes = getattr(exc, "__notes__", None)
        if isinstance(notes, list):
            notes[:] = [scrub(str(note)) for note in notes]
        exc = exc.__cause__ or exc.__context__


def _masked(value: Any) -> Any:
    """A value whose text shows a secret becomes that text, masked."""
    try:
        text = str(value)
    except Exception:
        return value
    masked = scrub(text)
    return value if masked == text else masked


class _MaskedRepr:
    """Stands for an object whose repr may quote a secret, in an unraisable's report."""

    def __init__(self, wrapped: object) -> None:
        self._text = scrub(repr(wrapped))

    def __repr__(self) -> str:
        return self._text


def mask_hooks() -> Callable[[], None]:
    """Mask what the interpreter's hooks get of exceptions in threads and unraisable ones;
    return what puts the hooks back.

    The hooks in place (pytest's, which turn them into warnings) still run; they see the
    exception with its text masked.
    """
    unraisable, excepthook = sys.unraisablehook, threading.excepthook

    def masked_unraisable(args: Any) -> None:
        mask_exception(args.exc_value)
        err_msg = scrub(args.err_msg) if args.err_msg else args.err_msg
        unraisable(
            SimpleNamespace(
                exc_type=args.exc_type,
                exc_value=args.exc_value,
                exc_traceback=args.exc_traceback,
                err_msg=err_msg,
                object=_MaskedRepr(args.object) if args.object is not None else None,
            )
        )

    def masked_excepthook(args: Any) -> None:
        mask_exception(args.exc_value)
        excepthook(args)

    sys.unraisablehook = masked_unraisable
    threading.excepthook = masked_excepthook

    def restore() -> None:
        sys.unraisablehook, threading.excepthook = unraisable, excepthook

    return restore


class _MaskingFilter(logging.Filter):
    """Masks a log record's message, exception text and stack in place, for every handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = scrub(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub(record.exc_text)
        if record.stack_info:
            record.stack_info = scrub(record.stack_info)
        return True


_FILTER = _MaskingFilter()


def mask_logging(logging_plugin: object | None) -> None:
    """Mask every record the handlers of pytest's logging plugin emit: live, file, captured."""
    if logging_plugin is None:
        return
    for name in ("log_cli_handler", "log_file_handler", "caplog_handler", "report_handler"):
        handler = getattr(logging_plugin, name, None)
        if isinstance(handler, logging.Handler) and _FILTER not in handler.filters:
            handler.addFilter(_FILTER)


@contextlib.contextmanager
def fd_output_masked() -> Iterator[None]:
    """Hold what is written to file descriptors 1 and 2 meanwhile, then pass it on masked.

    Covers raw writes (``os.write(1, ...)``), C extensions and child processes, which inherit
    the descriptors: a daemon the target starts keeps an unnamed file, never the caller's
    terminal or pipe, so the caller does not wait for it to exit.
    """
    with tempfile.TemporaryFile() as held:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        try:
            saved = [os.dup(1), os.dup(2)]
        except OSError:  # a standard stream is closed: nothing can be written to it anyway
            yield
            return
        try:
            os.dup2(held.fileno(), 1)
            os.dup2(held.fileno(), 2)
            yield
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            held.seek(0)
            text = held.read().decode("utf-8", "replace")
            if text:
                sys.stderr.write(scrub(text))
                sys.stderr.flush()
