"""The one output-safety rule of every pcgeom command that writes files.

``pcgeom group``, ``pcgeom preprocess``, ``pcgeom demo`` and
:meth:`pcgeom.nn.KNNClassifier.save_sharded` all write through these helpers, so
they share one rule:

* **An input is never an output.**  A target that resolves (after symlinks, or
  as the same file through a hard link) to one of the command's inputs is
  refused by name, with or without ``--overwrite``: ``--overwrite`` replaces
  earlier *outputs*, it never destroys what the user gave.
* **Writes are atomic.**  A file is written under a hidden temporary name in the
  target's folder and moved into place in one step, so a reader (or a rerun
  after a crash, even SIGKILL) sees the whole file or none of it.  Without
  ``overwrite`` the move refuses to clobber a file that appeared meanwhile.
* **File modes follow the umask**, as any other program's new files do
  (``0o666 & ~umask``), never the ``0o600`` of :func:`tempfile.mkstemp`.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Callable, Iterable

PARTIAL_SUFFIX = ".pcgeom-partial"


def _key(path: Path):
    """What identifies a file: its inode where it exists, else its resolved path."""
    try:
        st = path.stat()
        return ("inode", st.st_dev, st.st_ino)
    except OSError:
        return ("path", str(path.resolve()))


class InputGuard:
    """Remembers a command's inputs and refuses any output that is one of them.

    Args:
        inputs: the input files (paths or strings).  Folders are not expanded:
            pass the files that will be read.

    Example:
        >>> import os, tempfile
        >>> from pathlib import Path
        >>> from pcgeom.io.output import InputGuard
        >>> d = Path(tempfile.mkdtemp()); (d / "a.ply").write_bytes(b"ply")
        3
        >>> guard = InputGuard([d / "a.ply"])
        >>> guard.check("pcgeom preprocess", d / "b.ply")   # another file: fine
        >>> os.symlink(d / "a.ply", d / "link.ply")
        >>> try:
        ...     guard.check("pcgeom preprocess", d / "link.ply")   # the input, through a symlink
        ... except ValueError as exc:
        ...     print("refusing to write" in str(exc))
        True
    """

    def __init__(self, inputs: Iterable) -> None:
        self._inputs = {}
        for p in inputs:
            p = Path(p)
            self._inputs.setdefault(_key(p), p)

    def check(self, fn: str, target) -> None:
        """Raises ValueError if ``target`` is one of the inputs (the message names both)."""
        target = Path(target)
        hit = self._inputs.get(_key(target))
        if hit is None and target.exists():
            hit = self._inputs.get(("path", str(target.resolve())))
        if hit is not None:
            raise ValueError(f"{fn}: refusing to write {target}: it is the input {hit} (with or without "
                             "--overwrite, an input is never replaced); choose another --out")


def temporary_path(target) -> Path:
    """A fresh hidden name next to ``target`` for writing it atomically.

    The name holds ``.pcgeom-partial`` (never in an output name, so reruns and
    folder scans can tell it apart), keeps the target's suffix (writers that pick
    a format by suffix still work) and is unpredictable, so two writers never share it.
    """
    target = Path(target)
    return target.parent / f".{target.name}.{secrets.token_hex(6)}{PARTIAL_SUFFIX}{target.suffix}"


def is_partial(path) -> bool:
    """True for a temporary name made by :func:`temporary_path` (or a group run's private folder)."""
    return PARTIAL_SUFFIX in Path(path).name


def publish(tmp, target, *, overwrite: bool) -> None:
    """Moves a finished file into place in one step.

    Without ``overwrite`` a file that appeared at ``target`` meanwhile is kept and
    FileExistsError is raised; the temporary file is then left for the caller to remove.
    """
    if overwrite:
        os.replace(tmp, target)
        return
    try:
        os.link(tmp, target)  # refuses to clobber, unlike rename
    except FileExistsError:
        raise FileExistsError(f"output exists: {target} (pass --overwrite to replace)") from None
    except OSError:
        os.replace(tmp, target)  # file systems without hard links
    else:
        os.unlink(tmp)


def write_atomic(target, write: Callable[[Path], object], *, overwrite: bool) -> Path:
    """Writes ``target`` through ``write(tmp_path)`` and moves it into place atomically.

    ``write`` must create ``tmp_path`` itself (``open(tmp, "xb")``, ``torch.save``,
    ``write_ply``), so the new file's mode follows the umask.  The temporary file
    is removed whatever happens.

    Returns:
        ``Path(target)``.

    Raises:
        FileExistsError: ``target`` exists and ``overwrite`` is False (checked
            first, and again at the move).
    """
    target = Path(target)
    if not overwrite and target.exists():
        raise FileExistsError(f"output exists: {target} (pass --overwrite to replace)")
    tmp = temporary_path(target)
    try:
        write(tmp)
        publish(tmp, target, overwrite=overwrite)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def check_out_folder(fn: str, out) -> None:
    """Refuses an ``--out`` that exists but is not a folder, saying so plainly."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"{fn}: --out {out} is a file; --out must be a folder (created if missing)")
