"""mkdocs hooks (mkdocs.yml `hooks:`): the parts of the site that are generated at build time.

* ``<!-- cli-reference -->`` in a page becomes the ``--help`` text of ``pcgeom`` and of each of its
  subcommands, taken from the argparse parsers themselves (``pcgeom.cli.build_parser`` and the benchmark's
  own parser), never copied by hand.
* ``<!-- include: benchmarks/RESULTS.md -->`` becomes that results file (headings moved two levels down),
  so the benchmark page always shows the tables the benchmarks last wrote.

The functions are plain Python so that tests/test_docs.py can compare the generated text with ``--help``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELP_COLUMNS = "100"  # the width --help is rendered at, here and in the test that compares it


@contextlib.contextmanager
def help_environment():
    """Fixes what argparse's help output depends on: the terminal width and colour."""
    saved = {k: os.environ.get(k) for k in ("COLUMNS", "NO_COLOR", "PYTHON_COLORS")}
    os.environ["COLUMNS"] = HELP_COLUMNS
    os.environ["NO_COLOR"] = "1"
    os.environ["PYTHON_COLORS"] = "0"
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def cli_help_texts() -> dict[str, str]:
    """``{"pcgeom": top-level help, "pcgeom doctor": ..., ...}`` in the parser's own order."""
    from pcgeom import bench, cli

    with help_environment():
        parser = cli.build_parser()
        texts = {"pcgeom": parser.format_help()}
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    if name == "bench":
                        # `pcgeom bench` hands its arguments to the benchmark's own parser.
                        texts["pcgeom bench"] = bench.parser().format_help()
                    else:
                        texts[f"pcgeom {name}"] = sub.format_help()
    return texts


def cli_reference_markdown() -> str:
    out = []
    for command, text in cli_help_texts().items():
        anchor = command.replace(" ", "-")
        out.append(f"## `{command}` {{#{anchor}}}\n\n```text\n$ {command} --help\n{text.rstrip()}\n```\n")
    return "\n".join(out)


_INCLUDE = re.compile(r"^<!-- include: (?P<path>[^ ]+) -->$", re.M)


def _demote(md: str, levels: int = 2) -> str:
    lines, fence = [], False
    for line in md.splitlines():
        if line.startswith("```"):
            fence = not fence
        if not fence and line.startswith("#"):
            line = "#" * levels + line
        lines.append(line)
    return "\n".join(lines) + "\n"


def include_results(markdown: str) -> str:
    def repl(m):
        path = ROOT / m.group("path")
        if not path.is_file():
            raise FileNotFoundError(f"docs include: {path} does not exist")
        text = path.read_text(encoding="utf-8")
        text = re.sub(r"<!--.*?-->", "", text)  # the benchmark's own markers
        return _demote(text)

    return _INCLUDE.sub(repl, markdown)


def on_page_markdown(markdown, page, config, files, **kwargs):
    if "<!-- cli-reference -->" in markdown:
        markdown = markdown.replace("<!-- cli-reference -->", cli_reference_markdown())
    if "<!-- include: " in markdown:
        markdown = include_results(markdown)
    return markdown
