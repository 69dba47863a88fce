"""A griffe extension for the API reference (mkdocs.yml, mkdocstrings' ``extensions``).

pcgeom's docstrings title their doctests ``Example:`` (singular); Google style's section for doctests is
``Examples:``, and griffe reads any other title as an admonition of Markdown text, where ``>>>`` lines and list
outputs such as ``[0, 1]`` would render as quotes and links. This reads ``Example:`` as ``Examples:``, so every
example renders as code, without touching the docstrings.
"""

from __future__ import annotations

import re

import griffe

_EXAMPLE = re.compile(r"^(?P<indent>[ \t]*)Example:[ \t]*$", re.M)


class ExampleSections(griffe.Extension):
    def on_instance(self, *, obj, **kwargs) -> None:
        doc = obj.docstring
        if doc is not None and "Example:" in doc.value:
            doc.value = _EXAMPLE.sub(r"\g<indent>Examples:", doc.value)
