"""Fuzzing ``pcgeom.io.read_ply`` with malformed headers and bodies built from the bundled scans.

Every case must end, within a per-case time limit and a bounded peak of
Python/numpy memory, in a clean :class:`PlyFormatError` or a correct read
(the vertices plyfile decodes from the same bytes, where plyfile can); the
streamed reader ``iter_ply`` (chunks of 1 and 7 rows) must end each case the
same way: a PlyFormatError too, or chunks that concatenate to read_ply's cloud.  The
mutations are drawn from fixed seeds, so a failure names a reproducible case.
"""

from __future__ import annotations

import io
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import plyfile
import pytest

pytestmark = pytest.mark.slow  # fuzz runs, in a subprocess with a time limit

from pcgeom.io import PlyFormatError, iter_ply, read_ply

SCANS = sorted((Path(__file__).resolve().parents[1] / "pcgeom" / "data" / "scans").glob("*.ply"))
STREAM_CHUNKS = (1, 7)  # iter_ply must end each case as read_ply does, chunk by chunk
CASE_SECONDS = 2.0  # CPU seconds per case; a correct read of these ~2 KB files takes about a millisecond
MEMORY_LIMIT = 1 << 30  # address space the reading child may add to what it holds after importing torch
TYPES = ["char", "uchar", "short", "ushort", "int", "uint", "float", "double", "int8", "uint8", "int16",
         "uint16", "int32", "uint32", "float32", "float64", "string", "float128", "list", ""]
FORMATS = ["ascii", "binary_little_endian", "binary_big_endian", "binary_middle_endian", "ascii 2.0", ""]
COUNTS = ["0", "1", "2", "63", "65", "1000", "4294967296", "1000000000000", str(2**63), str(2**64 + 1),
          "99999999999999999999999999", "-1", "1e3", "0x10", "", "abc"]


class _Timeout(BaseException):
    """Raised by the per-case alarm; a BaseException so that no ``except Exception`` swallows it."""


def _base_files(scan: Path, n: int = 64) -> list[bytes]:
    """Small well-formed files in several layouts, from the first ``n`` vertices of a bundled scan."""
    ply = plyfile.PlyData.read(str(scan))
    vert = ply["vertex"].data[:n].copy()
    rng = np.random.default_rng(len(vert))
    faces = np.empty(5, dtype=[("vertex_indices", object)])
    faces["vertex_indices"] = [rng.integers(0, n, size=s).astype("i4") for s in (3, 3, 4, 3, 0)]
    tris = np.empty(4, dtype=[("vertex_indices", object)])
    tris["vertex_indices"] = [rng.integers(0, n, size=3).astype("i4") for _ in range(4)]
    v = plyfile.PlyElement.describe(vert, "vertex")
    out = []
    for elements, text, order in [
        ([v], False, "<"),
        ([v], True, "="),
        ([v], False, ">"),
        ([v, plyfile.PlyElement.describe(faces, "face")], False, "<"),
        ([plyfile.PlyElement.describe(faces, "face"), v], False, "<"),
        ([plyfile.PlyElement.describe(tris, "face"), v], False, ">"),
        ([plyfile.PlyElement.describe(faces, "face"), v], True, "="),
    ]:
        buf = io.BytesIO()
        plyfile.PlyData(elements, text=text, byte_order=order).write(buf)
        out.append(buf.getvalue())
    return out


def _split(data: bytes) -> tuple[list[bytes], bytes]:
    end = data.index(b"end_header\n") + len(b"end_header\n")
    return data[:end].split(b"\n")[:-1], data[end:]


def _join(lines: list[bytes], body: bytes) -> bytes:
    return b"\n".join(lines) + b"\n" + body


def _mutate(data: bytes, r: random.Random) -> tuple[str, bytes]:
    lines, body = _split(data)
    kind = r.choice(["count", "count", "type", "format", "truncate", "truncate", "empty_element", "list",
                     "drop_line", "dup_line", "swap_lines", "body_bytes", "header_bytes", "several"])
    element_lines = [i for i, ln in enumerate(lines) if ln.startswith(b"element ")]
    prop_lines = [i for i, ln in enumerate(lines) if ln.startswith(b"property ")]
    if kind == "count":
        i = r.choice(element_lines)
        w = lines[i].split(b" ")
        lines[i] = b" ".join(w[:2] + [r.choice(COUNTS).encode()])
    elif kind == "type":
        i = r.choice(prop_lines)
        w = lines[i].split(b" ")
        j = r.randrange(1, len(w) - 1)
        w[j] = r.choice(TYPES).encode()
        lines[i] = b" ".join(w)
    elif kind == "format":
        fmt = r.choice(FORMATS)
        lines[1] = f"format {fmt} 1.0".encode() if " " not in fmt else f"format {fmt}".encode()
    elif kind == "truncate":
        whole = _join(lines, body)
        return kind, whole[: r.randrange(0, len(whole))]
    elif kind == "empty_element":
        # An element with no properties (or only lists): plyfile would loop once per declared row.
        extra = [f"element blank{r.randrange(100)} {r.choice(COUNTS[5:9])}".encode()]
        if r.random() < 0.5:
            extra.append(f"property list {r.choice(['uchar', 'int', 'char'])} int idx".encode())
        at = r.choice(element_lines + [len(lines) - 1])
        lines[at:at] = extra
    elif kind == "list":
        i = r.choice(prop_lines)
        w = lines[i].split(b" ")
        lines[i] = b"property list " + r.choice([b"uchar", b"int", b"char", b"float", b"uint"]) + b" " + b" ".join(w[-2:])
    elif kind == "drop_line":
        del lines[r.randrange(len(lines))]
    elif kind == "dup_line":
        i = r.randrange(len(lines))
        lines.insert(i, lines[i])
    elif kind == "swap_lines":
        i, j = r.randrange(len(lines)), r.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == "body_bytes":
        b = bytearray(body)
        for _ in range(r.randrange(1, 8)):
            if b:
                b[r.randrange(len(b))] = r.randrange(256)
        body = bytes(b)
    elif kind == "header_bytes":
        whole = bytearray(_join(lines, body))
        hl = len(b"\n".join(lines))
        for _ in range(r.randrange(1, 4)):
            whole[r.randrange(hl)] = r.choice(b"\x00\xff\n\r 0123456789abcxyz")
        return kind, bytes(whole)
    elif kind == "several":
        name, out = _mutate(data, r)
        for _ in range(r.randrange(1, 3)):
            name2, out = _mutate(out, r) if b"end_header\n" in out else ("truncate", out)
            name += "+" + name2
        return name, out
    return kind, _join(lines, body)


def _cases():
    for s, scan in enumerate(SCANS):
        for b, base in enumerate(_base_files(scan)):
            yield f"{scan.stem}/layout{b}/original", base
            r = random.Random(1000 * s + b)
            for m in range(14):
                kind, data = _mutate(base, r)
                yield f"{scan.stem}/layout{b}/seed{1000 * s + b}/{m}/{kind}", data
    # The hostile files of the report, in every format.
    for fmt in ("binary_little_endian", "binary_big_endian", "ascii"):
        for extra in (b"", b"property list uchar int idx\n", b"property list int int idx\n"):
            for first in (True, False):
                blank = b"element blank 1000000000000\n" + extra
                vertex = b"element vertex 1\nproperty float x\nproperty float y\nproperty float z\n"
                vertex += b"property list uchar int ring\n" if extra else b""  # plyfile's per-row path
                head = f"ply\nformat {fmt} 1.0\n".encode() + (blank + vertex if first else vertex + blank) + b"end_header\n"
                body = b"0 0 0\n" if fmt == "ascii" else bytes(12)
                yield f"hostile/{fmt}/{extra!r}/blank_first={first}", head + body + bytes(max(0, 100 - len(head) - len(body)))


def _same_outcome(name: str, path: Path, result, streamed: dict) -> list[str]:
    """The streamed reads of a case end as read_ply's did: a PlyFormatError naming the file, or the same tensors."""
    import torch

    out = []
    for chunk, got in streamed.items():
        what = f"{name}: iter_ply(chunk_points={chunk})"
        if isinstance(result, PlyFormatError) or isinstance(got, PlyFormatError):
            if not (isinstance(result, PlyFormatError) and isinstance(got, PlyFormatError)):
                out.append(f"{what}: {got!r:.200} where read_ply gave {result!r:.200}")
            elif not str(got).startswith(f"read_ply: {path}: "):
                out.append(f"{what}: message does not name the file: {got}")
            continue
        if result is None:
            continue
        if [c.offset for c in got] != list(range(0, len(result.points), chunk)):
            out.append(f"{what}: chunk offsets {[c.offset for c in got][:5]}...")
            continue
        cat = (lambda ts: None if not got or ts[0] is None else torch.cat(ts))  # noqa: E731
        pairs = [(cat([c.points for c in got]), result.points), (cat([c.colors for c in got]), result.colors),
                 (cat([c.normals for c in got]), result.normals)]
        pairs += [(cat([c.properties[k] for c in got]), v) for k, v in result.properties.items()]
        for a, b in pairs if got else []:
            if (a is None) != (b is None) or (a is not None and (a.dtype != b.dtype or not torch.equal(
                    a.double().nan_to_num(), b.double().nan_to_num()))):
                out.append(f"{what}: the chunks differ from read_ply's cloud")
                break
    return out


def _oracle(path: Path):
    """xyz as plyfile decodes them (float64), or None when plyfile refuses the file."""
    try:
        v = plyfile.PlyData.read(str(path), mmap=False)["vertex"]
        return np.stack([np.asarray(v[c], dtype=np.float64) for c in "xyz"], 1)
    except Exception:
        return None


def _run_cases(folder: str) -> dict:
    """Reads every case under a per-case alarm; returns the outcome counts and the failures (child side).

    The alarm and the timing count this process's CPU time (ITIMER_PROF), not the wall clock: a runaway
    read is a CPU loop, and a loaded machine must not turn a 1 ms read into a reported hang."""
    import torch

    def alarm(signum, frame):
        raise _Timeout()

    signal.signal(signal.SIGPROF, alarm)
    outcomes = {"error": 0, "read": 0, "checked": 0}
    failures = []
    slowest = 0.0
    for i, (name, data) in enumerate(_cases()):
        path = Path(folder) / f"case{i}.ply"
        path.write_bytes(data)
        print(name, file=sys.stderr, flush=True)  # the parent names the case if this process hangs
        signal.setitimer(signal.ITIMER_PROF, CASE_SECONDS, 0.25)  # re-fires until disarmed
        t0 = time.process_time()
        streamed = {}
        try:
            result = read_ply(path, dtype=torch.float64)
        except PlyFormatError as exc:
            result = exc
        except _Timeout:
            result = None
            failures.append(f"{name}: still running after {CASE_SECONDS} CPU s")
        except BaseException as exc:  # anything else (MemoryError under the limit, IndexError, ...) is a defect
            result = None
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
        took = time.process_time() - t0
        for chunk in STREAM_CHUNKS:  # the streamed reader, under the same limits
            signal.setitimer(signal.ITIMER_PROF, CASE_SECONDS, 0.25)
            t1 = time.process_time()
            try:
                streamed[chunk] = list(iter_ply(path, chunk_points=chunk, dtype=torch.float64))
            except PlyFormatError as exc:
                streamed[chunk] = exc
            except _Timeout:
                failures.append(f"{name}: iter_ply(chunk_points={chunk}) still running after {CASE_SECONDS} CPU s")
            except BaseException as exc:
                failures.append(f"{name}: iter_ply(chunk_points={chunk}): {type(exc).__name__}: {exc}")
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
            took = max(took, time.process_time() - t1)
        failures += _same_outcome(name, path, result, streamed)
        slowest = max(slowest, took)
        if took > CASE_SECONDS:
            failures.append(f"{name}: took {took:.2f} CPU s")
        if isinstance(result, PlyFormatError):
            outcomes["error"] += 1
            if not str(result).startswith(f"read_ply: {path}: "):
                failures.append(f"{name}: message does not name the file: {result}")
        elif result is not None:
            outcomes["read"] += 1
            ref = _oracle(path)
            if ref is not None:
                outcomes["checked"] += 1
                got = result.points.numpy()
                if got.shape != ref.shape or not np.array_equal(got, ref, equal_nan=True):
                    failures.append(f"{name}: read {got.shape} points that differ from plyfile's {ref.shape}")
        path.unlink()
    return {"outcomes": outcomes, "failures": failures, "slowest": slowest, "cases": i + 1}


def test_fuzz_malformed_headers_and_bodies(tmp_path):
    # One child process for all cases, its address space capped: a huge allocation is a
    # MemoryError there (a reported failure), never a swapping machine.
    assert len(SCANS) == 4, SCANS
    code = (
        "import json, resource, sys; sys.path.insert(0, sys.argv[1]); import test_ply_fuzz as T; "
        "import torch, pcgeom.io; "
        "soft = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize() + int(sys.argv[3]); "
        "resource.setrlimit(resource.RLIMIT_AS, (soft, resource.RLIM_INFINITY)); "
        "print(json.dumps(T._run_cases(sys.argv[2])))"
    )
    try:
        run = subprocess.run([sys.executable, "-W", "ignore", "-c", code, str(Path(__file__).parent), str(tmp_path),
                              str(MEMORY_LIMIT)], capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired as exc:
        last = (exc.stderr or b"").decode(errors="replace").strip().splitlines()[-1:]
        pytest.fail(f"the fuzz run hung (uninterruptible by the per-case alarm) in case {last}")
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    failures, outcomes = report["failures"], report["outcomes"]
    assert not failures, "\n".join(failures[:20]) + f"\n({len(failures)} failures; outcomes {outcomes})"
    # The fuzz exercises both outcomes, and the correct reads were checked against plyfile.
    assert outcomes["error"] > 150 and outcomes["read"] > 40 and outcomes["checked"] > 40, outcomes
    assert report["slowest"] < CASE_SECONDS


@pytest.mark.parametrize("seed", range(3))
def test_fuzz_random_bytes_after_a_valid_header(tmp_path, seed):
    # Bodies of random bytes and lengths behind each layout's header: never anything but a clean outcome.
    r = random.Random(seed)
    for b, base in enumerate(_base_files(SCANS[seed])):
        lines, body = _split(base)
        for _ in range(10):
            data = _join(lines, r.randbytes(r.randrange(0, 2 * len(body) + 2)))
            path = tmp_path / f"r{b}.ply"
            path.write_bytes(data)
            try:
                result = read_ply(path)
            except PlyFormatError as exc:
                assert str(path) in str(exc)
                result = exc
            streamed = {}
            for chunk in STREAM_CHUNKS:
                try:
                    streamed[chunk] = list(iter_ply(path, chunk_points=chunk))
                except PlyFormatError as exc:
                    streamed[chunk] = exc
            assert not _same_outcome(f"r{b}", path, result, streamed)
