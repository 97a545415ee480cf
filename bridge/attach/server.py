"""The socket `sidekicks acp` reaches the running bridge by (docs/sessions.md "Attach an editor").

A path socket `acp.sock` in the data folder (the folder 0700, the socket 0600), never an abstract
one: the agents' sandbox hides the data folder (bridge/agent_specs.py), so an agent — which runs
as the owner's user — never reaches it, and whoever reaches it speaks as the owner. Each
connection's peer uid (SO_PEERCRED) must be the bridge's own. When the path is too long for a
Unix socket, it is made in a private temporary folder (0700) and its path written to
`acp.sock.where` (0600) in the data folder, where `sidekicks acp` reads it.

A connection sends one hello line (wire.py), then the client's ACP stream: the bridge answers as
the agent (service.py), with the project's JSON-RPC peer (acp/rpc.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import stat
import struct
import tempfile
from pathlib import Path

from acp.rpc import Peer

from . import wire
from .hub import Client
from .service import AttachService

log = logging.getLogger(__name__)

SOCKET_NAME = "acp.sock"
WHERE_NAME = "acp.sock.where"
MAX_SOCKET_PATH = 100  # bytes: sun_path holds 108, with its NUL
HELLO_TIMEOUT = 10.0


def socket_path(data_dir: str | os.PathLike) -> Path:
    """Where the running bridge listens for `sidekicks acp` (what server.start chose)."""
    folder = Path(data_dir)
    try:
        return Path((folder / WHERE_NAME).read_text().strip())
    except OSError:
        return folder / SOCKET_NAME


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (SO_PEERCRED)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


class AttachServer:
    def __init__(self, data_dir: str | os.PathLike, service: AttachService) -> None:
        self.data_dir, self.service = Path(data_dir), service
        self.path: Path | None = None
        self._server: asyncio.AbstractServer | None = None
        self._private_dir: str | None = None
        self._connections: set[asyncio.Task] = set()
        self._peers: set[Peer] = set()

    async def start(self) -> None:
        folder = self.data_dir
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        path, where = folder / SOCKET_NAME, folder / WHERE_NAME
        if len(os.fsencode(str(path))) > MAX_SOCKET_PATH:
            self._private_dir = tempfile.mkdtemp(prefix="sidekicks-acp-")  # 0700
            path = Path(self._private_dir) / SOCKET_NAME
        _unlink_socket(path)  # left by a bridge that was killed (the store's lock says none runs)
        where.unlink(missing_ok=True)
        old = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(self._connected, path=str(path))
            if self._private_dir is not None:
                where.write_text(str(path))
        except OSError as exc:  # the bridge goes on: no client attaches this run
            log.warning("ACP clients cannot attach: the socket %s failed (%s)", path, exc.strerror or exc)
            return
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        self.path = path
        log.info("ACP clients attach through %s (sidekicks acp)", path)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for peer in list(self._peers):  # the clients see their `sidekicks acp` end
            await peer.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self.path is not None:
            _unlink_socket(self.path)
            (self.data_dir / WHERE_NAME).unlink(missing_ok=True)
        if self._private_dir is not None:
            shutil.rmtree(self._private_dir, ignore_errors=True)

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        uid = peer_uid(sock) if sock is not None else -1
        if uid != os.getuid():
            log.warning("a connection to the ACP socket from uid %s was refused", uid)
            return
        try:
            line = await asyncio.wait_for(reader.readline(), HELLO_TIMEOUT)
            agent = wire.read_hello(line)
        except (TimeoutError, ValueError, asyncio.LimitOverrunError):
            log.warning("a connection to the ACP socket sent no hello: closed")
            return
        service = self.service
        client = Client(None, agent if agent in service.config.agents else None)

        async def on_request(method, params):
            return await service.request(client, method, params)

        async def on_notification(method, params):
            await service.notification(client, method, params)

        peer = client.peer = Peer(
            reader, writer, on_request=on_request, on_notification=on_notification, label="acp-client"
        )
        service.hub.clients.add(client)
        self._peers.add(peer)
        peer.start()
        delivering = asyncio.ensure_future(client.deliver())
        try:
            await peer.closed.wait()
        finally:
            delivering.cancel()
            service.hub.gone(client)
            self._peers.discard(peer)
            await peer.close()


def _unlink_socket(path: Path) -> None:
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    except FileNotFoundError:
        pass
