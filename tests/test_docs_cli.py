"""``docs/cli.md`` is generated from the ``antkv`` command's own parser, so it cannot drift.

:func:`render` turns :func:`antkv.tools.cli.build_parser` into the page: the command's help,
then every subcommand's ``--help`` as the parser prints it (at a fixed width of
:data:`WIDTH` columns, so the page does not depend on the terminal).  The test compares the page
with a fresh rendering; after changing a command, regenerate it with

    .venv/bin/python tests/test_docs_cli.py --write      (or: make docs-cli)
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "cli.md")
WIDTH = 100
REGENERATE = "make docs-cli"

HEADER = f"""# The `antkv` command: reference

<!-- generated from antkv.tools.cli.build_parser() by `{REGENERATE}` (tests/test_docs_cli.py); do not edit by hand -->

Every command of `antkv` (also `python -m antkv`) with every option, exactly as `antkv COMMAND
--help` prints it. How to use them to operate and repair a database, and to inspect a Spark
pipeline's checkpoint location, is in [operations.md](operations.md).
"""


def _fixed_width(parser: argparse.ArgumentParser) -> None:
    cls = parser.formatter_class
    parser.formatter_class = lambda prog, cls=cls: cls(prog, width=WIDTH)


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """``(words, parser)`` of the parser and of every subcommand, depth first, in the order the
    parser lists them."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, path + (name,))


def render() -> str:
    from antkv.tools.cli import build_parser

    parts = [HEADER]
    seen = set()
    for words, parser in _commands(build_parser()):
        if id(parser) in seen:  # an alias names a parser already shown
            continue
        seen.add(id(parser))
        _fixed_width(parser)
        title = " ".join(("antkv",) + words)
        parts.append(f"## `{title}`\n\n```text\n{parser.format_help().rstrip()}\n```\n")
    return "\n".join(parts)


def test_the_cli_reference_is_generated_from_the_parser():
    want = render()
    have = open(PAGE, encoding="utf-8").read() if os.path.exists(PAGE) else ""
    assert have == want, f"docs/cli.md differs from the parser: run `{REGENERATE}`"


def test_the_reference_covers_every_command_and_option():
    from antkv.tools.cli import build_parser

    page = open(PAGE, encoding="utf-8").read()
    for words, parser in _commands(build_parser()):
        assert f"## `{' '.join(('antkv',) + words)}`" in page
        for action in parser._actions:
            for flag in action.option_strings:
                assert flag in page, (words, flag)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_docs_cli.py --write   (rewrites docs/cli.md from the parser)")
    with open(PAGE, "w", encoding="utf-8") as f:
        f.write(render())
    print(f"wrote {os.path.relpath(PAGE, ROOT)}")
