"""Read a contract clause from the installed kit: ``python -m conformance.clauses PUT-1``.

Prints the clause's section exactly as ``docs/clauses.md`` renders it (promise, why it
matters, how it is usually broken, how it is proven), so a failure's clause can be read where
the source checkout and its ``docs/`` are not at hand. It takes any name a run prints for a
clause: the clause id (``DROP-2``), the check's id (``DROP-2-stale-version``), the test id
(``test_drop[DROP-2-stale-version]``, with or without ``test_contract.py::``) or the family
(``DROP`` prints each of its clauses). Without a name it lists every clause; ``--all`` prints
the whole document.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import textwrap
from collections.abc import Sequence

from conformance._violation import READ_COMMAND
from conformance.catalog import CLAUSES, FAMILY_TITLES, clause

__all__ = ["main", "resolve", "section"]

_TEST_ID = re.compile(r"^test_\w+\[(?P<id>.+)\]$")


def section(clause_id: str) -> str:
    """Return the markdown section of the clause ``clause_id`` (in any letter case); raise
    KeyError naming an unknown id."""
    from conformance.clauses_doc import clause_section

    return clause_section(clause(clause_id.upper()))


def resolve(name: str) -> tuple[str, ...]:
    """Return the ids of the clauses ``name`` stands for, in catalog order.

    ``name`` is a clause id, a check id, a test id or a family, in any letter case. Raises
    KeyError whose message lists every known clause id and family, and the forms accepted.
    """
    bare = name.strip().rsplit("::", 1)[-1]
    test = _TEST_ID.match(bare)
    wanted = (test.group("id") if test else bare).upper()
    ids = [found.id for found in CLAUSES]
    if wanted in ids:
        return (wanted,)
    if wanted in FAMILY_TITLES:
        return tuple(found.id for found in CLAUSES if found.family == wanted)
    prefixed = [clause_id for clause_id in ids if wanted.startswith(f"{clause_id}-")]
    if prefixed:
        return (max(prefixed, key=len),)
    from conformance._registry import all_checks

    for found in all_checks():
        if found.clause is None and found.slug.upper() == wanted:
            return tuple(clause_id for clause_id in ids if clause_id in found.judges)
    raise KeyError(_unknown(name, ids))


def _unknown(name: str, ids: list[str]) -> str:
    close = difflib.get_close_matches(name.strip().upper(), ids + list(FAMILY_TITLES), n=3)
    suggestion = f"; did you mean {', '.join(close)}?" if close else ""
    known = textwrap.fill(", ".join(ids), width=96, initial_indent="  ", subsequent_indent="  ")
    return (
        f"no clause, family or check is named {name!r}{suggestion}\n"
        "give a clause id, a family, or a check's id as a run prints it "
        "(DROP-2, DROP, DROP-2-stale-version, test_drop[DROP-2-stale-version]).\n"
        f"families: {', '.join(FAMILY_TITLES)}\n"
        f"clauses:\n{known}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Print the named clauses (0), the list of clauses, or an unknown name's error (2)."""
    parser = argparse.ArgumentParser(
        prog=READ_COMMAND, description="Print contract clauses as docs/clauses.md explains them."
    )
    parser.add_argument(
        "ids",
        nargs="*",
        metavar="NAME",
        help="a clause id (PUT-1), a family (PUT) or a test id (test_put[PUT-1-durable-on-return])",
    )
    parser.add_argument("--all", action="store_true", help="print the whole clauses document")
    args = parser.parse_args(argv)
    if args.all:
        from conformance.clauses_doc import render

        sys.stdout.write(render())
        return 0
    if not args.ids:
        for found in CLAUSES:
            print(f"{found.id}: {found.title}")
        return 0
    try:
        named = [clause_id for name in args.ids for clause_id in resolve(name)]
    except KeyError as unknown:
        print(f"{READ_COMMAND}: {unknown.args[0]}", file=sys.stderr)
        return 2
    print("\n\n".join(section(clause_id) for clause_id in dict.fromkeys(named)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
