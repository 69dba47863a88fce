"""Bad input to the pointops / pointops_cuda / torch_scatter stand-ins gets a named error, never a crash.

The sweep itself (every argument of every function, mutated one at a time)
is tests/compat_bad_input_sweep.py; see its docstring for what counts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import compat_bad_input_sweep as sweep_mod

HEADROOM = 4 << 30  # address space the sweep may add to what the child has mapped after importing torch


@pytest.mark.slow
def test_every_argument_of_every_stand_in_mutated_on_cpu():
    # A child process with its address space capped: index.max() = 2**31 - 1 asks for a 24 GiB output, which
    # must be a named error there, not a machine that swaps.  The meta device stands in for "another device".
    code = (
        "import json, resource, sys; sys.path.insert(0, sys.argv[1]); import compat_bad_input_sweep as S; "
        "soft = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize() + int(sys.argv[2]); "
        "resource.setrlimit(resource.RLIMIT_AS, (soft, resource.RLIM_INFINITY)); "
        "s = S.sweep('cpu', 'meta', huge=True); "
        "print(json.dumps({'findings': s.findings, 'named': s.named, 'passed': s.passed}))"
    )
    run = subprocess.run([sys.executable, "-W", "ignore", "-c", code, str(Path(__file__).parent), str(HEADROOM)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert not report["findings"], "\n".join(report["findings"][:30]) + f"\n({len(report['findings'])} findings)"
    # Both outcomes are exercised: thousands of named errors, and over a thousand mutations that are valid
    # input (long offsets, float64, NaN coordinates, ...) whose indices were range-checked.
    assert report["named"] > 3000 and report["passed"] > 1000, report


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (CPU tensors are then the other device)")
def test_every_argument_of_every_stand_in_mutated_on_cuda():
    s = sweep_mod.sweep("cuda", "cpu", huge=False)
    assert not s.findings, "\n".join(s.findings[:30])
    assert s.named > 3000 and s.passed > 1000, (s.named, s.passed)


def test_the_sweep_reports_what_it_should():
    # A function with no checks: torch's IndexError, an unnamed ValueError and an index outside the
    # range it promises are each a finding; a named error is not.
    def unchecked(idx, feat):
        if idx.dtype == torch.int16:
            raise ValueError("something went wrong")
        if idx.dtype == torch.uint8:
            raise ValueError("unchecked: idx must be int32 or int64, got torch.uint8")
        return feat[idx.long()], idx + 1

    s = sweep_mod.Sweep("cpu", "meta", huge=False)
    s.run("unchecked", unchecked, [torch.tensor([0, 1, 2]), torch.rand(4, 3)], 4)
    text = "\n".join(s.findings)
    assert "IndexError" in text and "unnamed ValueError: something went wrong" in text, text
    assert "returned index outside [-1, 4)" in text, text
    assert "uint8" not in text and s.named >= 1, text
