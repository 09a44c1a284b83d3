"""Writing an export safely: to a temporary file beside the target, then ``os.replace``;
reading a file no further than a size limit.

An existing file is never damaged (a failure leaves it as it was), keeps its permissions,
and every failure is an ``ExportError`` naming the path and the reason.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from typing import BinaryIO

from layerscope.errors import ExportError

__all__ = ["check_writable", "read_at_most", "write_text"]


def check_writable(path: str | os.PathLike[str]) -> str:
    """The folder ``path`` would be written in, if it can be (checked before a long run
    so that its result is not lost); an ``ExportError`` naming the reason if not."""
    target = os.fspath(path)
    if os.path.isdir(target):
        raise ExportError(f"cannot write {target}: it is a directory")
    folder = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(folder):
        raise ExportError(f"cannot write {target}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ExportError(f"cannot write {target}: the folder {folder} is not writable")
    return folder


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    target = os.fspath(path)
    folder = check_writable(target)
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    except OSError as e:
        raise ExportError(f"cannot write {target}: {e.strerror or e}") from e
    fd, tmp = -1, ""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".layerscope-", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            fd = -1  # owned by the file object now
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
        tmp = ""
    except (OSError, UnicodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ExportError(f"cannot write {target}: {reason}") from e
    finally:
        if fd >= 0:
            os.close(fd)
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


#: How much a file of unknown size (a pipe, a device) is read at a time.
_CHUNK = 1 << 20


def read_at_most(f: BinaryIO, limit: int) -> bytes | None:
    """The whole of ``f``, or None when it holds more than ``limit`` bytes; never reads
    more than ``limit + 1`` (a regular file in one read of its size, a pipe or a device,
    which has no size, a chunk at a time)."""
    size = os.fstat(f.fileno()).st_size
    if size > limit:
        return None
    chunks: list[bytes] = []
    total = 0
    want = size + 1 if size else _CHUNK  # /proc files say 0: read on until the end
    while total <= limit:
        chunk = f.read(min(want, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        want = _CHUNK
    return None if total > limit else b"".join(chunks)
