"""The documentation is tested like code.

* Every Python code block of ``docs/**/*.md`` and ``README.md`` runs: the blocks of one page one after the other in
  one namespace (as a reader runs them), in an empty folder, in one subprocess for all pages. A block preceded by
  the line ``<!-- not-run: reason -->`` is only compiled.
* Every public name (``pcgeom.__all__`` and the ``__all__`` of the documented submodules) has an entry in the built
  API reference, and the CLI reference in the built site is exactly ``--help`` of every command.
* The benchmark plot script draws every plot from the committed results files.
* Every doctest in pcgeom's docstrings (the Example of each API entry) runs, in one subprocess.

The built-site checks use ``$PCGEOM_DOCS_SITE`` when CI has built the site already (``mkdocs build --strict``), and
otherwise build it here; without mkdocs (the ``docs`` extra) they are skipped.
"""

from __future__ import annotations

import html
import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = sorted((ROOT / "docs").glob("**/*.md")) + [ROOT / "README.md"]
NOT_RUN = re.compile(r"^\s*<!--\s*not-run:\s*(?P<reason>.*?)\s*-->\s*$")
FENCE_OPEN = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)")


def extract_blocks(path: Path) -> list[dict]:
    """The fenced Python blocks of a Markdown file: ``{"line", "code", "not_run"}`` (reason or None)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE_OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group("indent"), m.group("fence"), m.group("lang").lower()
        start = i
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            line = lines[i]
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            i += 1
        i += 1  # the closing fence
        if lang not in ("python", "py"):
            continue
        prev = lines[start - 1] if start > 0 else ""
        nr = NOT_RUN.match(prev)
        blocks.append({"line": start + 1, "code": "\n".join(body) + "\n",
                       "not_run": nr.group("reason") if nr else None})
    return blocks


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def test_the_block_extractor_sees_markers_fences_and_indentation(tmp_path):
    md = tmp_path / "page.md"
    md.write_text(textwrap.dedent("""\
        text
        ```python
        a = 1
        ```
        <!-- not-run: needs a GPU -->
        ```python
        b = torch.rand(3, device="cuda")
        ```
        ```bash
        echo not python
        ```
        - item

          ```python
          c = a + 1
          ```
        """))
    blocks = extract_blocks(md)
    assert [b["line"] for b in blocks] == [2, 6, 14]
    assert [b["not_run"] for b in blocks] == [None, "needs a GPU", None]
    assert blocks[2]["code"] == "c = a + 1\n"


_RUNNER = r"""
import json, os, sys, tempfile, traceback
pages = json.load(open(sys.argv[1]))
results = {}
for page in pages:
    cwd = tempfile.mkdtemp(prefix="pcgeom-docs-")
    os.chdir(cwd)
    ns = {"__name__": "__main__"}
    results[page["file"]] = None
    for block in page["blocks"]:
        try:
            exec(compile(block["code"], f"{page['file']}:{block['line']}", "exec"), ns)
        except BaseException:
            results[page["file"]] = f"block at line {block['line']} failed:\n" + traceback.format_exc()
            break
json.dump(results, open(sys.argv[2], "w"))
"""


@pytest.fixture(scope="module")
def block_results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("docs-blocks")
    pages = [{"file": _rel(p), "blocks": [b for b in extract_blocks(p) if b["not_run"] is None]} for p in DOC_FILES]
    (tmp / "pages.json").write_text(json.dumps(pages))
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    env["TMPDIR"] = str(tmp)  # the pages' working folders (and their temporary files) go with pytest's tmp_path
    proc = subprocess.run([sys.executable, "-c", _RUNNER, str(tmp / "pages.json"), str(tmp / "out.json")],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"the block runner crashed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads((tmp / "out.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("path", DOC_FILES, ids=_rel)
def test_every_python_block_runs(path, block_results):
    error = block_results[_rel(path)]
    assert error is None, f"{_rel(path)}: {error}"


@pytest.mark.parametrize("path", DOC_FILES, ids=_rel)
def test_not_run_blocks_compile_and_say_why(path):
    for block in extract_blocks(path):
        if block["not_run"] is not None:
            assert block["not_run"], f"{_rel(path)}:{block['line']}: a not-run marker needs its reason"
            compile(block["code"], f"{_rel(path)}:{block['line']}", "exec")


def test_the_docs_have_python_blocks_to_run():
    runnable = sum(1 for p in DOC_FILES for b in extract_blocks(p) if b["not_run"] is None)
    not_run = sum(1 for p in DOC_FILES for b in extract_blocks(p) if b["not_run"] is not None)
    assert runnable >= 20 and not_run <= runnable // 3, (runnable, not_run)


def test_readme_is_a_front_page():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    for command in ("bash scripts/demo.sh", "bash scripts/test.sh", "mkdocs serve", "mkdocs build --strict"):
        assert command in text, command


# --------------------------------------------------------------------------- the built site
@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    given = os.environ.get("PCGEOM_DOCS_SITE")
    if given:
        path = Path(given)
        assert (path / "index.html").is_file(), f"PCGEOM_DOCS_SITE={given} holds no built site"
        return path
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None:
        pytest.skip("mkdocs is not installed (pip install '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return out


def _page_text(path: Path) -> str:
    raw = path.read_text(encoding="utf-8")
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


DOCUMENTED_MODULES = ["pcgeom", "pcgeom.nn", "pcgeom.distributed", "pcgeom.compat", "pcgeom.io", "pcgeom.vis",
                      "pcgeom.data", "pcgeom.metrics", "pcgeom.losses", "pcgeom.streaming"]


@pytest.mark.slow
def test_every_public_name_has_an_api_entry(site):
    ids = set()  # the ids of headings: mkdocstrings gives each documented object one, named by its path
    for page in (site / "api").glob("**/*.html"):
        ids.update(re.findall(r'<h[1-6][^>]*\bid="([\w.]+)"', page.read_text(encoding="utf-8")))
    missing = []
    for modname in DOCUMENTED_MODULES:
        mod = importlib.import_module(modname)
        for name in mod.__all__:
            obj = getattr(mod, name)
            # the public path, or where the object is defined (pcgeom.knn is documented as pcgeom.ops.knn.knn,
            # since the module pcgeom.ops.knn shares the name)
            paths = {f"{modname}.{name}", f"{getattr(obj, '__module__', modname)}.{name}"}
            if not paths & ids:
                missing.append(f"{modname}.{name}")
    assert not missing, f"no entry in the built API reference for {missing}"
    # the entries carry their docstrings, not just a heading
    top = _page_text(site / "api" / "pcgeom" / "index.html")
    assert "Returns" in top and "Example" in top and "query_lengths" in top


_HELP_RUNNER = r"""
import contextlib, io, json, sys
sys.path.insert(0, sys.argv[1])
from scripts.docs_hooks import cli_help_texts, help_environment
from pcgeom import cli
out = {}
with help_environment():
    for command in cli_help_texts():
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            try:
                cli.main(command.split()[1:] + ["--help"])
            except SystemExit:
                pass
        out[command] = buf.getvalue()
print(json.dumps(out))
"""


@pytest.mark.slow
def test_cli_reference_is_the_help_of_every_command(site):
    proc = subprocess.run([sys.executable, "-c", _HELP_RUNNER, str(ROOT)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    helps = json.loads(proc.stdout)
    assert {"pcgeom", "pcgeom doctor", "pcgeom compat", "pcgeom bench", "pcgeom demo", "pcgeom group"} <= set(helps)
    page = _page_text(site / "cli" / "index.html")
    for command, text in helps.items():
        assert text.strip(), f"`{command} --help` printed nothing"
        assert f"$ {command} --help\n{text.rstrip()}" in page, f"the CLI reference differs from `{command} --help`"


@pytest.mark.slow
def test_benchmark_page_shows_the_results_and_the_plots(site):
    page = (site / "benchmarks" / "index.html").read_text(encoding="utf-8")
    for png in ("workloads", "ratios", "scaling", "distributed", "grid"):
        assert f"assets/benchmarks/{png}.png" in page
        assert (site / "assets" / "benchmarks" / f"{png}.png").is_file()
    text = _page_text(site / "benchmarks" / "index.html")
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    # a row of the results file, as it stands, is on the page
    row = next(line for line in results.splitlines() if line.startswith("| knn-mae | cube |"))
    assert row.split("|")[3].strip() in text


# --------------------------------------------------------------------------- the plot script
def _plots_module():
    spec = importlib.util.spec_from_file_location("make_bench_plots", ROOT / "scripts" / "make_bench_plots.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_results_tables_are_parsed_by_their_columns():
    mod = _plots_module()
    text = "# t\n\nnote\n\n| a | b |\n|---|---:|\n| x | 2,583 |\n| y | skipped |\n\n| op | N |\n|---|---|\n| fps | 10^6 |\n"
    tables = mod.parse_tables(text)
    assert [t["header"] for t in tables] == [["a", "b"], ["op", "N"]]
    assert mod.number(tables[0]["rows"][0][1]) == 2583 and mod.number(tables[0]["rows"][1][1]) is None
    assert mod.number(tables[1]["rows"][0][1]) == 1e6
    assert mod.find_table(tables, "N", "op") is tables[1] and mod.find_table(tables, "zzz") is None


def test_plot_script_draws_every_plot_from_the_results_files(tmp_path):
    pytest.importorskip("matplotlib")
    mod = _plots_module()
    assert mod.main(["--out", str(tmp_path)]) == 0
    for png in ("workloads", "ratios", "scaling", "distributed", "grid"):
        data = (tmp_path / f"{png}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
        assert (ROOT / "docs" / "assets" / "benchmarks" / f"{png}.png").is_file(), f"{png}.png is not committed"


# --------------------------------------------------------------------------- the docstrings' examples
# Every module whose docstrings hold a doctest (the API reference shows them as the Example of each entry).
# Found where `import pcgeom` finds them (site-packages when CI checks an installed wheel).
_PKG = Path(importlib.util.find_spec("pcgeom").origin).parent
DOCTEST_MODULES = sorted(
    ".".join(p.relative_to(_PKG.parent).with_suffix("").parts).removesuffix(".__init__")
    for p in _PKG.glob("**/*.py")
    if ">>>" in p.read_text(encoding="utf-8")
)

_DOCTEST_RUNNER = r"""
import doctest, importlib, io, json, os, sys, tempfile
os.chdir(tempfile.mkdtemp(prefix="pcgeom-doctest-"))
out = {}
for name in json.loads(sys.argv[1]):
    buf = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    try:
        for test in doctest.DocTestFinder().find(importlib.import_module(name)):
            runner.run(test, out=buf.write)
        r = runner.summarize(verbose=False)
        out[name] = [r.attempted, r.failed, buf.getvalue()[-4000:]]
    except BaseException as exc:
        out[name] = [0, 1, repr(exc)]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def doctest_results(tmp_path_factory):
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    env["TMPDIR"] = str(tmp_path_factory.mktemp("doctests"))  # not left behind in /tmp after the run
    proc = subprocess.run([sys.executable, "-c", _DOCTEST_RUNNER, json.dumps(DOCTEST_MODULES)], env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_docstrings_hold_examples():
    assert len(DOCTEST_MODULES) >= 20, DOCTEST_MODULES


@pytest.mark.slow
@pytest.mark.parametrize("module", DOCTEST_MODULES)
def test_docstring_examples_run(module, doctest_results):
    attempted, failed, report = doctest_results[module]
    assert attempted > 0 and failed == 0, f"{module}: {failed} of {attempted} examples failed:\n{report}"
