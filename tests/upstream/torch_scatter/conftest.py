"""Serve torch_scatter's own tests with pcgeom's stand-in.

The vendored test modules import ``torch_scatter`` and
``torch_scatter.testing`` at import time, so both are put in ``sys.modules``
when this conftest is imported, before collection of this folder, and
restored when the session ends.  A real installed torch_scatter is not
consulted: these tests are about the stand-in.  When the process already
imported ``torch_scatter`` through ``pcgeom.compat.enable_shims()`` (see
``tests/upstream/test_upstream.py``), that served module is kept.
"""

import importlib.util
import os
import sys
import warnings

import pcgeom.compat.torch_scatter as _shim

_HERE = os.path.dirname(__file__)
_spec = importlib.util.spec_from_file_location("torch_scatter.testing", os.path.join(_HERE, "testing.py"))
_testing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_testing)

warnings.filterwarnings("ignore", message="Passing a non-Collection iterable")
warnings.filterwarnings("ignore", message="`torch.jit.script` is deprecated")

_saved = {name: sys.modules.get(name) for name in ("torch_scatter", "torch_scatter.testing")}
_served = sys.modules.get("torch_scatter")
if getattr(_served, "__pcgeom_shim__", None) != _shim.__name__:
    _served = _shim
sys.modules["torch_scatter"] = _served
sys.modules["torch_scatter.testing"] = _testing
_served.testing = _testing


def pytest_sessionfinish(session, exitstatus):
    for name, mod in _saved.items():
        if mod is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = mod


def pytest_configure(config):
    # Upstream's files pass itertools.product to parametrize and script
    # functions; both only warn, and the warnings are not about pcgeom.
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:torch.jit")
    config.addinivalue_line("filterwarnings", "ignore:Passing a non-Collection iterable")
    config.addinivalue_line("filterwarnings", "ignore:`torch.jit.script` is deprecated")
