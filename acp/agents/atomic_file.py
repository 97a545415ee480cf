"""Writing a file of the local agent's atomically: the session JSON files (sessions.py) and the
saved KV states (kvstates.py) both go to a temporary file in the same folder (mode 0600, from
mkstemp), which replaces the file only once fully written, and is removed if writing fails.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def replacing(path: Path, binary: bool = False) -> Iterator[IO[Any]]:
    """`with replacing(path) as f: f.write(…)`: `path` holds what was written once the block
    ends; on an error (or an interrupt) it is as it was, and no temporary file is left."""
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=path.suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
