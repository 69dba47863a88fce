"""Serve torch_cluster's own tests with pcgeom's shim.

The vendored test modules import ``torch_cluster`` at import time (and
``test_fps.py`` scripts a function then), so the modules are put in
``sys.modules`` when this conftest is imported, before collection of this
folder, and restored when the session ends.
"""

import importlib.util
import os
import sys
import warnings

import pcgeom.compat.torch_cluster as _shim

_HERE = os.path.dirname(__file__)
_spec = importlib.util.spec_from_file_location("torch_cluster.testing", os.path.join(_HERE, "testing.py"))
_testing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_testing)

# Collection of the upstream files warns (itertools.product passed to
# parametrize, torch.jit.script deprecated); the warnings are not about pcgeom.
warnings.filterwarnings("ignore", message="Passing a non-Collection iterable")
warnings.filterwarnings("ignore", message="`torch.jit.script` is deprecated")

_saved = {name: sys.modules.get(name) for name in ("torch_cluster", "torch_cluster.testing")}
sys.modules["torch_cluster"] = _shim
sys.modules["torch_cluster.testing"] = _testing
_shim.testing = _testing


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
