"""Shared test grid: devices (CUDA only when present), dtypes and input factories.

The input factories are pcgeom.bench's (imported below), so tests and benchmarks see the same inputs.
"""

from __future__ import annotations

import os
import signal

import pytest
import torch

# Started in the background of a non-interactive shell (`nohup ... &`), the suite inherits SIGINT
# ignored, and so would every process it starts: the interruption tests would send SIGINT to
# children that cannot receive it.  A handler (unlike SIG_IGN) resets to the default on exec, and the
# children's Python then installs its own KeyboardInterrupt handler.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Keep inductor's cache inside a temp folder, not the user's home.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".inductor-cache"))

# tests/upstream/pyg is driven by tests/test_pyg.py in its own interpreters (one per PyG version); the main run
# must not even import its conftest.py, which would shadow this module as `conftest` for `from conftest import ...`.
collect_ignore = ["upstream/pyg", "upstream/pyg28"]

# The op suite (`-m ops`: run a second time on the pure-torch path by scripts/test.sh) is marked in each
# file by `pytestmark = pytest.mark.ops`; nothing here lists files.
def pytest_configure(config):
    config.addinivalue_line("markers", "ops: the op suite, run on both the native and the pure-torch path")


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
FLOAT_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


@pytest.fixture(params=DEVICES)
def device(request):
    return torch.device(request.param)


# The cloud factories live with the benchmark's inputs, so tests and benchmarks share one set;
# the tests import them from here (`from conftest import random_cloud`).
from pcgeom.bench.workloads import clustered_cloud, lattice_cloud, random_cloud, surface_cloud  # noqa: E402, F401


# --- tests/fuzz: the long differential fuzz run (docs/guides/robustness.md) ---
def pytest_addoption(parser):
    parser.addoption("--fuzz-long", action="store_true", default=False,
                     help="run tests/fuzz with the long hypothesis profile (same as PCGEOM_FUZZ_LONG=1)")


def pytest_sessionstart(session):
    # Before collection, so tests/fuzz/strategies.py sees it when it picks its profile at import.
    if session.config.getoption("--fuzz-long"):
        os.environ["PCGEOM_FUZZ_LONG"] = "1"
