"""The one gate for a local file an agent asks the bridge to post
(docs/SECURITY.md "What an agent cannot do").

An agent is steered by untrusted text, so a `resource_link` to `file:///…` (and any later way an
agent names a local file) is read only through `read_agent_file`: the file must be a regular file
inside the working directory of the agent's session (a thread's worktree, the channel's `!cwd`,
else the configured cwd) once every link is resolved (`realpath`), never inside the
bridge's own configuration or data folders (registration tokens, device keys, the owner's
password), opened without following a link (`O_NOFOLLOW`) and without blocking (`O_NONBLOCK`: a
FIFO never wedges the answer), checked with `fstat` (`S_ISREG`: no device, no FIFO, no socket;
one name only, `st_nlink == 1`: a hard link made in the working directory to a file outside it
— the registration, a key — is the same file under a name inside, which no path check sees),
and read up to a byte cap — never trusting the size the file reports (`/proc` files say 0).

Anything else is refused with a reason written for the owner, one line, saying what and why.
An agent over ssh (acp/remote.py) runs on another host: every path it names is refused, since the
file it means is there; it can embed the content instead (an ACP resource with text or blob).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from acp.remote import destination, files_refused, is_remote

from ...matrix.media import MediaError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Refused:
    """Why a file was not read, for the room's line ("⚠️ [file: x] could not be posted: <reason>")."""

    reason: str


@dataclass(frozen=True)
class FileRoots:
    """Where an agent may post files from (`allowed`: the working directory of its session, None
    when it has none) and where never (`forbidden`: the bridge's config and data folders)."""

    allowed: str | None
    forbidden: tuple[str, ...] = ()
    agent: str = ""
    remote: str | None = None  # the host an agent over ssh runs on: none of its paths is read here

    async def read(self, path: str | os.PathLike, limit: int) -> bytes:
        """The bytes of `path` through the gate (off the event loop, at most `limit`);
        MediaError with the reason it is refused (matrix/media.py `post` asks this)."""
        if self.remote is not None:
            raise MediaError(files_refused(self.agent, self.remote))
        read = await asyncio.to_thread(read_agent_file, path, self.allowed, self.forbidden, limit)
        if isinstance(read, Refused):
            log.warning("%s asked to post %s: refused, %s", self.agent or "an agent", path, read.reason)
            raise MediaError(read.reason)
        return read


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB".replace(".0 MiB", " MiB")


def read_agent_file(
    path: str | os.PathLike,
    allowed_root: str | os.PathLike | None,
    forbidden_roots: Iterable[str | os.PathLike],
    max_bytes: int,
) -> bytes | Refused:
    """The bytes of `path` if an agent may post it, else Refused with the reason."""
    if allowed_root is None:
        return Refused(
            "the agent has no working directory configured (agents.<name>.cwd), and agents post files only from there"
        )
    raw = os.fspath(path)
    if not os.path.isabs(raw):
        return Refused("not an absolute path")
    try:
        real = os.path.realpath(raw, strict=True)
    except (OSError, RuntimeError) as exc:  # missing, a loop of links, no permission
        return Refused(f"it could not be found ({_why(exc)})")
    for forbidden in forbidden_roots:
        if _inside(real, os.path.realpath(os.fspath(forbidden))):
            return Refused("it is in the bridge's own configuration or data folder, which agents cannot post from")
    root = os.path.realpath(os.fspath(allowed_root))
    if not _inside(real, root):
        return Refused("it is outside the agent's working directory")
    try:  # a device or a pipe is not even opened (opening one can do things)
        before = os.stat(real, follow_symlinks=False)
    except OSError as exc:
        return Refused(f"it could not be found ({_why(exc)})")
    if not stat.S_ISREG(before.st_mode):
        return Refused(f"it is not a regular file ({_kind(before.st_mode)})")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(real, flags)
    except OSError as exc:  # ELOOP: the last part became a link after realpath
        if exc.errno == errno.ELOOP:
            return Refused("it is a link")
        return Refused(f"it could not be opened ({_why(exc)})")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # swapped since the stat above
            return Refused(f"it is not a regular file ({_kind(info.st_mode)})")
        if info.st_nlink > 1:  # of the file opened: a link made after any check by path is seen
            return Refused(
                f"it has {info.st_nlink} hard links (another name of the same file may lie "
                "outside the working directory): copy it to post it"
            )
        opened = _opened_path(fd)  # a folder on the way swapped for a link after realpath
        if opened is not None and opened != real:
            return Refused("it moved while it was opened")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            return Refused(f"it is bigger than the {_mib(max_bytes)} limit (limits.attachment_mib)")
        return b"".join(chunks)
    except OSError as exc:
        return Refused(f"it could not be read ({_why(exc)})")
    finally:
        os.close(fd)


def roots_for(config, agent: str, session_cwd: str | None = None) -> FileRoots:
    """The FileRoots of `agent` under `config` (config.model.Config): it may post from the
    directory its session works in (`session_cwd`: a thread's worktree, the channel's `!cwd`),
    else from its configured cwd. The bridge's own folders stay forbidden wherever it works."""
    agent_config = config.agents.get(agent)
    cwd = session_cwd or (agent_config.cwd if agent_config is not None else None)
    allowed = os.path.abspath(os.path.expanduser(cwd)) if cwd else None
    forbidden = [Path(config.path).parent, Path(config.data_dir), Path(config.registration_path).parent]
    homeserver_config = getattr(config, "homeserver_config", None)
    if homeserver_config is not None:
        forbidden.append(Path(homeserver_config).parent)
    command = getattr(agent_config, "command", None) or []
    host = destination(command) if is_remote(command) else None  # its files are on that host
    return FileRoots(allowed, tuple(str(Path(p).expanduser().absolute()) for p in forbidden), agent, host)


def _opened_path(fd: int) -> str | None:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # no /proc: realpath + O_NOFOLLOW is what there is
        return None


def _kind(mode: int) -> str:
    for test, word in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a pipe"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return word
    return "not a file"


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__
