"""Writing an export safely: to a temporary file beside the target, then ``os.replace``.

An existing file is never damaged (a failure leaves it as it was), keeps its permissions,
and every failure is an ``ExportError`` naming the path and the reason.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile

from layerscope.errors import ExportError

__all__ = ["write_text"]


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    target = os.fspath(path)
    if os.path.isdir(target):
        raise ExportError(f"cannot write {target}: it is a directory")
    folder = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(folder):
        raise ExportError(f"cannot write {target}: the folder {folder} does not exist")
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
