"""A JSON-RPC 2.0 peer over asyncio streams, using acp.framing for the wire.

One reader task reads chunks (never readline: ACP lines can be many MiB),
splits them into messages and handles them strictly in arrival order:

* responses resolve the matching `request()`;
* notifications are awaited inline, so their handlers see them in order and
  a prompt's response is only seen after every update sent before it;
* requests run as separate tasks, because a handler such as
  session/request_permission may wait minutes for a person, and meanwhile
  later notifications must keep flowing.

A malformed line is logged and skipped. When the stream ends every pending
request fails with ConnectionLost.

`$/cancel_request` {requestId} (ACP's protocol-level cancellation) works both ways:
a request of ours abandoned before its reply (the awaiting task was cancelled)
is cancelled at the peer, and a request of the peer's that it cancels has its
handler task cancelled and is answered with error -32800 (request cancelled).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from . import framing
from .errors import ConnectionLost, RpcError

log = logging.getLogger(__name__)

RequestHandler = Callable[[str, Any], Awaitable[Any]]
NotificationHandler = Callable[[str, Any], Any]

READ_SIZE = 1 << 16
YIELD_AFTER = 0.005  # seconds of handling one read's messages before the loop is given back
CANCEL_REQUEST = "$/cancel_request"
REQUEST_CANCELLED = -32800


class Peer:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        on_request: RequestHandler | None = None,
        on_notification: NotificationHandler | None = None,
        label: str = "peer",
    ):
        self._reader, self._writer = reader, writer
        self._on_request, self._on_notification = on_request, on_notification
        self.label = label
        self._ids = itertools.count(1)
        self._pending: dict[Any, asyncio.Future] = {}
        self._handlers: set[asyncio.Task] = set()
        # the peer's requests being handled, by id: the handler's future once it runs
        self._answering: dict[Any, asyncio.Future | None] = {}
        self._withdrawn: set[Any] = set()  # ids the peer cancelled with $/cancel_request
        self._task: asyncio.Task | None = None
        self.closed = asyncio.Event()
        self.close_reason = ""
        # Any byte from the peer counts as a sign of life (also part of a big line).
        self.last_activity = time.monotonic()

    def start(self) -> None:
        self._task = asyncio.create_task(self._read_loop(), name=f"acp-read-{self.label}")

    # -- outgoing --------------------------------------------------------------
    async def _send(
        self,
        message: dict[str, Any],
        on_sent: Callable[[], None] | None = None,
        on_written: Callable[[], None] | None = None,
    ) -> None:
        if self.closed.is_set():
            raise ConnectionLost(f"{self.label}: connection closed ({self.close_reason})")
        try:
            data = framing.encode(message)
            if on_sent is not None:
                # right before the write, no await between: the reader cannot run in between, so
                # whatever the peer sends after reading it is read after this
                on_sent()
            self._writer.write(data)
            if on_written is not None:
                # only once every byte is out of this process (in the pipe or socket to the peer):
                # a caller that records "written" (bridge/channels/turns/journal.py) then never
                # has it recorded while a kill of this process could still lose it. A transport
                # closing by now dropped the write or failed it (the peer's end was closed):
                # its buffer is empty all the same, and nothing reached the peer
                if self._writer.transport.is_closing():
                    raise ConnectionLost(f"{self.label}: cannot write (the connection is closing)")
                await self._flushed()
                on_written()
            await self._writer.drain()
        except (ConnectionError, RuntimeError) as exc:  # broken pipe, closed transport
            raise ConnectionLost(f"{self.label}: cannot write ({exc})") from exc

    async def _flushed(self) -> None:
        """Until nothing written is left in the transport's buffer. A write goes straight to the
        pipe when it has room; what did not fit waits in our memory, which a kill loses."""
        transport = self._writer.transport
        if not transport.get_write_buffer_size():
            return
        low, high = transport.get_write_buffer_limits()
        transport.set_write_buffer_limits(high=0, low=0)  # drain() now waits for an empty buffer
        try:
            await self._writer.drain()
        finally:
            if not transport.is_closing():
                transport.set_write_buffer_limits(high=high, low=low)

    async def request(
        self,
        method: str,
        params: Any = None,
        on_sent: Callable[[], None] | None = None,
        before_send: Callable[[], Awaitable[None]] | None = None,
        on_written: Callable[[], None] | None = None,
    ) -> Any:
        """Send a request and wait for its result. `on_sent` runs as the request is written (right
        before it, no await between), before anything the peer sends after it can be read.
        `before_send` is awaited first, and the request is written as soon as it returns (no other
        await between): a caller that records "about to send" there leaves the smallest window in
        which a kill finds it recorded and not written. `on_written` runs once the whole request
        is out of this process (in the pipe to the peer): a kill from then on cannot lose it."""
        if before_send is not None:
            await before_send()
        request_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        written = False

        def sent() -> None:
            nonlocal written
            written = True
            if on_sent is not None:
                on_sent()

        try:
            await self._send(framing.request(request_id, method, params), sent, on_written)
            return await future
        except asyncio.CancelledError:
            # (cancelling us cancelled the future too: only a reply makes it "answered")
            if written and (future.cancelled() or not future.done()):
                self._cancel_at_peer(request_id)
            raise
        finally:
            self._pending.pop(request_id, None)

    def _cancel_at_peer(self, request_id: Any) -> None:
        """We no longer wait for `request_id`: tell the peer (it may ignore it)."""
        if self.closed.is_set():
            return
        try:  # no drain: this runs while the caller is being cancelled
            self._writer.write(framing.encode(framing.notification(CANCEL_REQUEST, {"requestId": request_id})))
        except (ConnectionError, RuntimeError):
            pass

    async def notify(self, method: str, params: Any = None) -> None:
        await self._send(framing.notification(method, params))

    # -- incoming --------------------------------------------------------------
    async def _read_loop(self) -> None:
        buffer = framing.LineBuffer()
        reason = "end of stream"
        try:
            while True:
                data = await self._reader.read(READ_SIZE)
                if not data:
                    tail = buffer.close()
                    if tail and tail.strip():
                        await self._handle(framing.decode(tail))
                    break
                self.last_activity = time.monotonic()
                since = time.perf_counter()
                for message in framing.iter_messages(buffer, data):
                    await self._handle(message)
                    if time.perf_counter() - since > YIELD_AFTER:  # a flood of small messages
                        await asyncio.sleep(0)  # lets every other room have the loop a moment
                        since = time.perf_counter()
        except asyncio.CancelledError:
            reason = "closed"
            raise
        except Exception as exc:  # a bug here must not leave requests hanging
            log.exception("%s: reader failed", self.label)
            reason = f"reader failed: {exc}"
        finally:
            self._shutdown(reason)

    async def _handle(self, message: dict[str, Any] | framing.ParseError) -> None:
        if isinstance(message, framing.ParseError):
            log.warning("%s: ignoring a line that is not JSON-RPC: %s", self.label, message)
            return
        kind = framing.classify(message)
        if kind == framing.RESPONSE:
            future = self._pending.get(message["id"])
            if future is None or future.done():
                log.debug("%s: response to unknown id %r", self.label, message["id"])
            elif "error" in message:
                err = message["error"] if isinstance(message["error"], dict) else {}
                future.set_exception(
                    RpcError(
                        err.get("code", framing.INTERNAL_ERROR),
                        str(err.get("message", "unknown error")),
                        err.get("data"),
                    )
                )
            else:
                future.set_result(message.get("result"))
        elif kind == framing.NOTIFICATION:
            if message["method"] == CANCEL_REQUEST:
                self._peer_cancels(message.get("params"))
                return
            if self._on_notification is None:
                return
            try:
                outcome = self._on_notification(message["method"], message.get("params"))
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:
                log.exception("%s: notification handler failed for %s", self.label, message["method"])
        elif kind == framing.REQUEST:
            self._answering[message["id"]] = None  # a withdrawal may follow before it runs
            task = asyncio.create_task(self._answer(message))
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        else:
            log.warning("%s: ignoring an invalid message: %.200s", self.label, message)

    def _peer_cancels(self, params: Any) -> None:
        request_id = params.get("requestId") if isinstance(params, dict) else None
        if not isinstance(request_id, (str, int)) or request_id not in self._answering:
            log.debug("%s: $/cancel_request for no request being handled (%r)", self.label, request_id)
            return
        self._withdrawn.add(request_id)
        handling = self._answering[request_id]
        if handling is not None:
            handling.cancel()

    async def _answer(self, message: dict[str, Any]) -> None:
        request_id, method = message["id"], message["method"]
        handling: asyncio.Future | None = None
        try:
            if self._on_request is None:
                raise RpcError(framing.METHOD_NOT_FOUND, f"method not found: {method}")
            if request_id in self._withdrawn:
                raise RpcError(REQUEST_CANCELLED, "Request cancelled")
            # The handler runs as its own future, so that a withdrawal cancels it and not us.
            handling = asyncio.ensure_future(self._on_request(method, message.get("params")))
            self._answering[request_id] = handling
            reply = framing.result(request_id, await handling)
        except asyncio.CancelledError:
            withdrawn = (
                request_id in self._withdrawn
                and handling is not None
                and handling.cancelled()
                and not asyncio.current_task().cancelling()
                and not self.closed.is_set()
            )
            if not withdrawn:  # we are closing: nobody waits for the reply
                if handling is not None:
                    handling.cancel()
                raise
            reply = framing.error(request_id, REQUEST_CANCELLED, "Request cancelled")
        except RpcError as exc:
            reply = framing.error(request_id, exc.code, exc.message, exc.data)
        except Exception as exc:
            log.exception("%s: request handler failed for %s", self.label, method)
            reply = framing.error(request_id, framing.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
        finally:
            self._answering.pop(request_id, None)
            self._withdrawn.discard(request_id)
        try:
            await self._send(reply)
        except ConnectionLost:
            pass  # the peer is gone; nobody waits for this reply

    # -- closing ---------------------------------------------------------------
    def _shutdown(self, reason: str) -> None:
        if self.closed.is_set():
            return
        self.close_reason = reason
        self.closed.set()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionLost(f"{self.label}: connection closed ({reason})"))
        for task in list(self._handlers):
            task.cancel()

    async def close(self) -> None:
        """Stop reading; pending requests fail with ConnectionLost."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.wait({self._task})  # unlike `await`, never re-raises
        self._shutdown("closed")
        try:
            self._writer.close()
        except Exception:
            pass
