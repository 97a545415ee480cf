"""acp.rpc.Peer: two peers joined by a socket pair, no processes."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from asyncio.streams import FlowControlMixin

import pytest

from acp.errors import ConnectionLost, RpcError
from acp.rpc import Peer


async def pair(a_kw=None, b_kw=None):
    s1, s2 = socket.socketpair()
    r1, w1 = await asyncio.open_connection(sock=s1)
    r2, w2 = await asyncio.open_connection(sock=s2)
    a, b = Peer(r1, w1, label="a", **(a_kw or {})), Peer(r2, w2, label="b", **(b_kw or {}))
    a.start(), b.start()
    return a, b, w1


async def test_a_waiting_request_handler_does_not_hold_back_notifications():
    gate, seen = asyncio.Event(), []

    async def slow(method, params):
        await gate.wait()  # e.g. a person deciding on a permission
        return {"answered": method}

    a, b, _ = await pair(b_kw={"on_request": slow, "on_notification": lambda m, p: seen.append(p["n"])})
    try:
        call = asyncio.create_task(a.request("session/request_permission", {}))
        for n in range(5):
            await a.notify("session/update", {"n": n})
        deadline = asyncio.get_running_loop().time() + 60
        while len(seen) < 5 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        assert seen == [0, 1, 2, 3, 4] and not call.done()
        gate.set()
        assert await asyncio.wait_for(call, 60) == {"answered": "session/request_permission"}
    finally:
        await a.close(), await b.close()


async def test_response_is_seen_after_the_notifications_sent_before_it():
    seen = []

    async def slow_notification(method, params):
        await asyncio.sleep(0.02)
        seen.append(params["n"])

    b_holder = {}

    async def handler(method, params):
        for n in range(3):
            await b_holder["b"].notify("session/update", {"n": n})
        return "done"

    a, b, _ = await pair(a_kw={"on_notification": slow_notification}, b_kw={"on_request": handler})
    b_holder["b"] = b
    try:
        assert await a.request("session/prompt", {}) == "done"
        assert seen == [0, 1, 2]
    finally:
        await a.close(), await b.close()


async def test_errors_come_back_as_rpc_error():
    async def handler(method, params):
        if method == "bad":
            raise RpcError(-32602, "bad params", {"field": "x"})
        raise ValueError("boom")

    a, b, _ = await pair(b_kw={"on_request": handler})
    try:
        with pytest.raises(RpcError) as err:
            await a.request("bad", {})
        assert (err.value.code, err.value.message, err.value.data) == (-32602, "bad params", {"field": "x"})
        with pytest.raises(RpcError) as err:
            await a.request("other", {})
        assert err.value.code == -32603 and "boom" in err.value.message
        with pytest.raises(RpcError) as err:  # a has no request handler at all
            await b.request("anything", {})
        assert err.value.code == -32601
    finally:
        await a.close(), await b.close()


async def test_malformed_lines_are_logged_and_the_connection_survives(caplog):
    a, b, a_writer = await pair(b_kw={"on_request": lambda m, p: asyncio.sleep(0, "fine")})
    try:
        a_writer.write(b'{not json\n[1,2]\n{"jsonrpc":"2.0"}\n\n')
        assert await a.request("ping", {}) == "fine"
        assert "not JSON-RPC" in caplog.text and "invalid message" in caplog.text
    finally:
        await a.close(), await b.close()


async def test_pending_requests_fail_when_the_other_side_goes_away():
    arrived = asyncio.Event()

    async def never(method, params):
        arrived.set()
        await asyncio.Event().wait()

    a, b, _ = await pair(b_kw={"on_request": never})
    call = asyncio.create_task(a.request("session/prompt", {}))
    await asyncio.wait_for(arrived.wait(), 60)  # the request is pending on the other side
    await b.close()
    with pytest.raises(ConnectionLost, match="connection closed"):
        await asyncio.wait_for(call, 60)
    with pytest.raises(ConnectionLost):
        await a.request("again", {})
    await a.close()


async def into_a_pipe() -> tuple[Peer, int, asyncio.WriteTransport]:
    """A peer that writes into a real pipe, as the bridge into an agent's stdin; the pipe's read
    end (non-blocking), read by the test alone."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.connect_write_pipe(FlowControlMixin, os.fdopen(write_fd, "wb", buffering=0))
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    return Peer(asyncio.StreamReader(), writer, label="bridge"), read_fd, transport


def drained(read_fd: int) -> bytes:
    """Everything in the pipe now."""
    out = b""
    while True:
        try:
            chunk = os.read(read_fd, 1 << 16)
        except BlockingIOError:
            return out
        if not chunk:
            return out
        out += chunk


async def test_on_written_runs_once_the_whole_request_is_in_the_pipe():
    # a turn records "prompted" here (docs/reliability.md "Exactly once"): from then on a kill -9
    # of the bridge must leave the prompt in the agent's stdin, else the answer would be shown
    # as interrupted although the agent never had its message
    peer, read_fd, transport = await into_a_pipe()
    in_pipe: list[bytes] = []
    call = asyncio.create_task(
        peer.request("session/prompt", {"prompt": "msg 32"}, on_written=lambda: in_pipe.append(drained(read_fd)))
    )
    try:
        await wait_for_condition(lambda: in_pipe)
        line = in_pipe[0]
        assert line.endswith(b"\n") and json.loads(line)["params"] == {"prompt": "msg 32"}
    finally:
        call.cancel()
        transport.close()
        os.close(read_fd)


async def test_on_written_waits_while_the_request_is_still_in_our_buffer():
    # the agent has not read its stdin for a while: the pipe is full, the request waits in the
    # bridge's memory — "written" only once it has left it
    peer, read_fd, transport = await into_a_pipe()
    written = asyncio.Event()
    filler = b"x" * (1 << 16)
    while True:  # fill the pipe
        try:
            os.write(transport.get_extra_info("pipe").fileno(), filler)
        except BlockingIOError:
            break
    prompt = {"prompt": "y" * 100_000}
    call = asyncio.create_task(peer.request("session/prompt", prompt, on_written=written.set))
    try:
        await wait_for_condition(lambda: transport.get_write_buffer_size() > 0)  # written, not all of it in the pipe
        assert not written.is_set()
        got = b""
        while not written.is_set():  # the agent reads again
            got += drained(read_fd)
            await asyncio.sleep(0.01)
        got += drained(read_fd)
        assert json.loads(got.lstrip(b"x"))["params"] == prompt
    finally:
        call.cancel()
        transport.close()
        os.close(read_fd)


@pytest.mark.parametrize("noticed", [False, True])
async def test_on_written_never_runs_for_a_request_the_pipe_did_not_take(noticed):
    # the agent's end of its stdin is closed (the agent died): asyncio drops a write to a pipe
    # closed by its reader, or fails it, and leaves its buffer empty either way — nothing of the
    # prompt reached the agent, so it must not be recorded as written ("prompted": a kill before
    # the crash is shown would then mark the answer interrupted as begun)
    peer, read_fd, transport = await into_a_pipe()
    os.close(read_fd)
    if noticed:  # the transport saw the reader go: later writes are dropped without an error
        await wait_for_condition(transport.is_closing)
    written: list[bool] = []
    try:
        with pytest.raises(ConnectionLost):
            await asyncio.wait_for(
                peer.request("session/prompt", {"prompt": "msg 32"}, on_written=lambda: written.append(True)), 60
            )
        assert not written
    finally:
        transport.close()


async def wait_for_condition(predicate, timeout: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not met"
        await asyncio.sleep(0.01)
