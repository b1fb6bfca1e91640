"""Read a contract clause from the installed kit: ``python -m conformance.clauses PUT-1``.

Prints the clause's section exactly as ``docs/clauses.md`` renders it (promise, why it
matters, how it is usually broken, how it is proven), so a failure's clause can be read where
the source checkout and its ``docs/`` are not at hand. Without an id it lists every clause;
``--all`` prints the whole document.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from conformance._violation import READ_COMMAND
from conformance.catalog import CLAUSES, clause

__all__ = ["main", "section"]


def section(clause_id: str) -> str:
    """Return the markdown section of the clause ``clause_id`` (in any letter case); raise
    KeyError naming an unknown id."""
    from conformance.clauses_doc import clause_section

    return clause_section(clause(clause_id.upper()))


def main(argv: Sequence[str] | None = None) -> int:
    """Print the named clauses (0), the list of clauses, or an unknown id's error (2)."""
    parser = argparse.ArgumentParser(
        prog=READ_COMMAND, description="Print contract clauses as docs/clauses.md explains them."
    )
    parser.add_argument("ids", nargs="*", metavar="ID", help="clause ids such as PUT-1")
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
        texts = [section(clause_id) for clause_id in args.ids]
    except KeyError as unknown:
        print(f"{READ_COMMAND}: {unknown.args[0]}", file=sys.stderr)
        return 2
    print("\n\n".join(texts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
