"""bridge/channels/base/notices.py: who says a notice in a channel, a long one in several messages
(HTML only when it is one), and a notice that cannot be sent is logged, never raised."""

from __future__ import annotations

from types import SimpleNamespace

from bridge.channels.base import stream
from bridge.channels.base.notices import Notices
from bridge.matrix.client import MatrixError


class Sender:
    def __init__(self, name, refuse=False):
        self.user_id, self.refuse, self.sent = name, refuse, []
        self.intent = self

    async def send(self, room_id, content):
        if self.refuse:
            raise MatrixError("sending: M_FORBIDDEN not in the room", 403)
        self.sent.append((room_id, content))
        return f"${len(self.sent)}"


def identities(bot, **puppets):
    async def puppet(agent):
        return puppets[agent]

    return SimpleNamespace(bot=bot, puppet=puppet)


async def test_a_channel_notice_is_said_by_the_puppet_given_else_the_first_member_else_the_bot():
    bot, alice, bob = Sender("bot"), Sender("alice"), Sender("bob")
    notices = Notices(identities(bot, alice=alice, bob=bob))
    await notices.in_channel("!r", ["alice", "bob"], "one")
    await notices.in_channel("!r", ["alice", "bob"], "two", bob)
    await notices.in_channel("!r", [], "three")
    portal = SimpleNamespace(room_id="!p", member_names=lambda: ["bob"])
    await notices.notice(portal, "four")
    assert [c["body"] for _, c in alice.sent] == ["one"]
    assert [(r, c["body"]) for r, c in bob.sent] == [("!r", "two"), ("!p", "four")]
    assert [c["body"] for _, c in bot.sent] == ["three"]
    assert all(c["msgtype"] == "m.notice" for s in (bot, alice, bob) for _, c in s.sent)


async def test_a_long_notice_goes_in_parts_without_html_and_a_refused_one_is_only_logged(monkeypatch, caplog):
    bot = Sender("bot")
    notices = Notices(identities(bot))
    await notices.send(bot, "!r", "short", "<b>short</b>")
    assert bot.sent[-1][1]["formatted_body"] == "<b>short</b>"
    monkeypatch.setattr("bridge.channels.base.notices.notice_parts", lambda text: stream.notice_parts(text, limit=40))
    await notices.send(bot, "!r", "word " * 30, "<p>words</p>")
    parts = [c for _, c in bot.sent[1:]]
    assert len(parts) > 1 and not any("formatted_body" in c for c in parts)
    await notices.send(Sender("gone", refuse=True), "!r", "nobody hears this")
    assert any("could not send a notice to !r" in r.getMessage() for r in caplog.records)


async def test_a_notice_into_a_thread_carries_its_relation():
    from bridge.channels.base.conversations import thread_relation

    class ThreadSender(Sender):
        async def send(self, room_id, content, event_type="m.room.message", txn_id=None):
            return await super().send(room_id, content)

    bot, alice = ThreadSender("bot"), ThreadSender("alice")
    notices = Notices(identities(bot, alice=alice))
    portal = SimpleNamespace(room_id="!p", member_names=lambda: ["alice"])
    await notices.notice(portal, "in the thread", relates_to=thread_relation("$root", "$asked"))
    await notices.notice(portal, "in the main timeline")
    (_, threaded), (_, main) = alice.sent
    assert threaded["m.relates_to"] == thread_relation("$root", "$asked") and "m.relates_to" not in main
    assert alice.intent is alice  # the puppet itself is left as it was
