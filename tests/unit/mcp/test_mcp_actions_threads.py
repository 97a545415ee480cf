"""The MCP tools act in the caller's conversation (bridge/mcp/actions.py, SPEC §15-16): `history`
reads that conversation's messages (a thread: its root and its own), `send_file` posts into it."""
from __future__ import annotations

from types import SimpleNamespace

from bridge.mcp import actions
from bridge.mcp.actions import Means, Scope
from store import Store
from store.offloop import OffLoop


async def test_history_is_the_callers_conversation():
    store = Store.open(":memory:")
    try:
        channel = store.create_channel("!r:hs", "general")
        store.add_message(channel.id, "@me:hs", "user", "the root", ["$root"])
        store.add_message(channel.id, "@me:hs", "user", "in the thread", ["$t"], conversation="$root")
        store.add_message(channel.id, "@me:hs", "user", "main later", ["$m"])
        means = Means(OffLoop(store), SimpleNamespace(), SimpleNamespace(), lambda: None)
        main = await actions.history(means, Scope(channel.id, "!r:hs", "", "alice"), 10, None)
        thread = await actions.history(means, Scope(channel.id, "!r:hs", "$root", "alice"), 10, None)
        assert "main later" in main and "in the thread" not in main
        assert "the root" in thread and "in the thread" in thread and "main later" not in thread
    finally:
        store.close()
