"""``pcgeom doctor``: where the build came from, which GPUs its CUDA code covers, and the fix it names."""

from __future__ import annotations

import pytest
import torch

import pcgeom
from pcgeom.cli import doctor, main

# Facts of NVIDIA's compatibility rules (CUDA C Programming Guide, "Binary Compatibility"
# and "Application Compatibility"), written out case by case rather than computed.
ARCHS = {"cubin": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"], "ptx": ["compute_120"]}
COVERAGE = [
    ((7, 5), ("cubin", "sm_75")),
    ((8, 0), ("cubin", "sm_80")),
    ((8, 6), ("cubin", "sm_86")),
    ((8, 9), ("cubin", "sm_86")),   # same major, higher minor: the newest lower cubin runs
    ((9, 0), ("cubin", "sm_90")),
    ((10, 3), ("cubin", "sm_100")),
    ((11, 0), ("none", None)),      # no 11.x cubin, and PTX for 12.0 cannot run on 11.0
    ((12, 1), ("cubin", "sm_120")),
    ((13, 0), ("ptx", "compute_120")),  # a future GPU: JIT from the newest PTX
    ((7, 0), ("none", None)),
]


@pytest.mark.parametrize("cap, expected", COVERAGE)
def test_arch_coverage_follows_cuda_binary_compatibility(cap, expected):
    assert doctor.arch_coverage(cap, ARCHS) == expected


def test_arch_specific_cubins_and_ptx_run_on_their_own_arch_only():
    archs = {"cubin": ["sm_90a"], "ptx": ["compute_100a"]}
    assert doctor.arch_coverage((9, 0), archs) == ("cubin", "sm_90a")
    assert doctor.arch_coverage((9, 1), archs) == ("none", None)
    assert doctor.arch_coverage((10, 0), archs) == ("ptx", "compute_100a")
    assert doctor.arch_coverage((10, 3), archs) == ("none", None)
    with pytest.raises(ValueError, match="sm90"):
        doctor.arch_coverage((9, 0), {"cubin": ["sm90"]})


def test_provenance_names_wheel_and_source_builds():
    assert doctor.provenance({"origin": "wheel", "distribution": "pcgeom-cu12", "built_with_torch": "2.10.0+cu128"}) \
        == "prebuilt wheel pcgeom-cu12 (built with torch 2.10.0+cu128)"
    assert doctor.provenance({"origin": "source", "built_with_torch": "2.13.0+cpu"}) == "source build (built with torch 2.13.0+cpu)"
    # A record written before the origin was kept can only be a source build.
    assert doctor.provenance({"built_with_torch": "2.13.0"}) == "source build (built with torch 2.13.0)"
    assert doctor.provenance({"origin": "source", "skipped": "PCGEOM_NO_EXT=1"}).startswith("source install without native kernels")
    assert doctor.provenance({}).startswith("unknown")


@pytest.mark.parametrize("build, torch_cuda, expected", [
    ({"origin": "wheel", "distribution": "pcgeom", "cuda_requested": False}, "13.0", "pip uninstall -y pcgeom && pip install pcgeom-cu13"),
    ({"origin": "wheel", "distribution": "pcgeom", "cuda_requested": False}, "12.6", "pip uninstall -y pcgeom && pip install pcgeom-cu12"),
    ({"origin": "wheel", "distribution": "pcgeom-cu12", "cuda_requested": True, "cuda_version": "12.8"}, "13.0",
     "pip uninstall -y pcgeom-cu12 && pip install pcgeom-cu13"),
    ({"origin": "wheel", "distribution": "pcgeom-cu13", "cuda_requested": True, "cuda_version": "13.0"}, "13.2", None),
    ({"origin": "wheel", "distribution": "pcgeom", "cuda_requested": False}, None, None),  # CPU torch: nothing to fix
    ({"origin": "source", "cuda_requested": False}, "13.0", None),  # a source build gets the rebuild hint instead
])
def test_cuda_wheel_fix(build, torch_cuda, expected):
    assert doctor.cuda_wheel_fix(build, torch_cuda) == expected


def test_cuda_wheel_fix_for_a_cuda_major_without_a_wheel():
    fix = doctor.cuda_wheel_fix({"origin": "wheel", "distribution": "pcgeom"}, "11.8")
    assert "CUDA 11.8" in fix and "FORCE_CUDA=1" in fix


def _fake_info(build, **over):
    info = {"extension_loaded": True, "native_devices": ["cpu"], "stable_abi": True, "torch_version": "2.14.1+cu130",
            "cuda_available": False, "load_error": None, "cuda_extension_loaded": False, "cuda_load_error": None,
            "disabled_by_env": False, "built_with_torch": build.get("built_with_torch"), "build": build}
    info.update(over)
    return info


def test_doctor_names_the_cuda_wheel_when_a_cpu_wheel_meets_a_cuda_torch(monkeypatch, capsys):
    build = {"origin": "wheel", "distribution": "pcgeom", "cuda_requested": False, "built_with_torch": "2.13.0+cpu",
             "cuda_skipped": "PCGEOM_NO_CUDA=1"}
    monkeypatch.setattr(pcgeom, "backend_info", lambda: _fake_info(build))
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "installed from     prebuilt wheel pcgeom (built with torch 2.13.0+cpu)" in out
    assert "CUDA architectures none: CPU kernels only" in out
    assert "pip uninstall -y pcgeom && pip install pcgeom-cu13" in out


def test_doctor_lists_the_compiled_architectures(monkeypatch, capsys):
    build = {"origin": "wheel", "distribution": "pcgeom-cu13", "cuda_requested": True, "cuda_version": "13.0",
             "built_with_torch": "2.14.1+cu130", "cuda_archs": {"cubin": ["sm_75", "sm_120"], "ptx": ["compute_120"]}}
    monkeypatch.setattr(pcgeom, "backend_info", lambda: _fake_info(build, cuda_load_error="not loaded: this torch has no CUDA (the CPU kernels serve)"))
    monkeypatch.setattr(torch.version, "cuda", None)
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "installed from     prebuilt wheel pcgeom-cu13" in out
    assert "CUDA architectures cubins sm_75, sm_120; PTX compute_120 (CUDA 13.0)" in out
    assert "this torch has no CUDA" in out
    assert "pip install pcgeom-cu" not in out


def test_doctor_reports_this_process_s_own_build(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert f"installed from     {doctor.provenance(pcgeom.backend_info()['build'])}" in out
