"""`$/cancel_request` in acp.rpc.Peer, both ways, over a socket pair (no processes)."""

from __future__ import annotations

import asyncio
import json
import socket

from acp.rpc import Peer


async def test_a_request_the_other_side_withdraws_is_answered_cancelled():
    started, ended = asyncio.Event(), asyncio.Event()

    async def handler(method, params):
        started.set()
        try:
            await asyncio.Event().wait()  # a person deciding, forever
        finally:
            ended.set()

    ours, theirs = socket.socketpair()
    reader, writer = await asyncio.open_connection(sock=ours)
    peer = Peer(reader, writer, on_request=handler, label="us")
    peer.start()
    raw_reader, raw_writer = await asyncio.open_connection(sock=theirs)

    async def send(*messages):
        for message in messages:
            raw_writer.write(json.dumps(message).encode() + b"\n")
        await raw_writer.drain()

    def withdraw(request_id):
        return {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": request_id}}

    cancelled = {"code": -32800, "message": "Request cancelled"}
    try:
        # withdrawn while its handler waits: the handler is cancelled
        await send({"jsonrpc": "2.0", "id": "q1", "method": "elicitation/create", "params": {}})
        await asyncio.wait_for(started.wait(), 10)
        await send(withdraw("q1"))
        reply = json.loads(await asyncio.wait_for(raw_reader.readline(), 10))
        assert reply == {"jsonrpc": "2.0", "id": "q1", "error": cancelled}
        assert ended.is_set()
        # withdrawn before its handler ran (same read): answered without running it
        started.clear()
        await send({"jsonrpc": "2.0", "id": 7, "method": "elicitation/create", "params": {}}, withdraw(7))
        reply = json.loads(await asyncio.wait_for(raw_reader.readline(), 10))
        assert reply == {"jsonrpc": "2.0", "id": 7, "error": cancelled} and not started.is_set()
        # a withdrawal of something unknown (or already answered) changes nothing
        await send(withdraw("nope"))
        assert not peer.closed.is_set() and peer._answering == {} and peer._withdrawn == set()
    finally:
        raw_writer.close()
        await peer.close()


async def test_an_abandoned_request_is_withdrawn_and_a_finished_one_is_not():
    s1, s2 = socket.socketpair()
    r1, w1 = await asyncio.open_connection(sock=s1)
    raw_reader, raw_writer = await asyncio.open_connection(sock=s2)
    peer = Peer(r1, w1, label="us")
    peer.start()
    try:
        answered = asyncio.create_task(peer.request("session/set_mode", {"modeId": "plan"}))
        first = json.loads(await asyncio.wait_for(raw_reader.readline(), 10))
        raw_writer.write(json.dumps({"jsonrpc": "2.0", "id": first["id"], "result": {}}).encode() + b"\n")
        await raw_writer.drain()
        assert await asyncio.wait_for(answered, 10) == {}
        abandoned = asyncio.create_task(peer.request("session/set_mode", {"modeId": "code"}))
        second = json.loads(await asyncio.wait_for(raw_reader.readline(), 10))
        assert second["method"] == "session/set_mode"  # no withdrawal of the answered one came first
        abandoned.cancel()
        withdrawal = json.loads(await asyncio.wait_for(raw_reader.readline(), 10))
        assert withdrawal == {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": second["id"]}}
        assert abandoned.cancelled()
    finally:
        raw_writer.close()
        await peer.close()
