"""bridge/channels/asks/asks.py: asking the owner and waiting for the answer — a numbered answer, a
wrong number, a reaction, an answer in words, a timeout, a cancel, and what the ask's message
shows after — against stand-ins of the puppet, the notices and the turn's answer (no I/O). The
two kinds plugged into it (permissions.py, coding/questions.py) are checked through it last."""

from __future__ import annotations

import asyncio
from functools import partial
from types import SimpleNamespace

import pytest
from bridge_harness import wait_until
from scene_helpers import SentNotices

from acp import ElicitationAnswer, PermissionRequest
from acp.elicitation import ACCEPT, DECLINE, parse_request
from bridge.channels.asks.asks import KEYCAPS, Ask, Asking, Asks
from bridge.channels.asks.permissions import Permissions
from bridge.channels.base.parts import AskedIn
from bridge.coding.questions import Questions
from bridge.matrix.client import MatrixError

ROOM = "!room:hs"
WAITING = "🔧 waiting for you"
TIMED_OUT = "⏱ no answer"
STOPPED = "⏹ stopped"


class Intent:
    """The puppet's way out: what it sent, reacted and edited."""

    def __init__(self, refuse: bool = False):
        self.sent: list[tuple[str, dict]] = []
        self.reactions: list[tuple[str, str]] = []
        self.edits: list[tuple[str, dict]] = []
        self.refuse = refuse

    async def send(self, room_id, content):
        if self.refuse:
            raise MatrixError("M_FORBIDDEN")
        self.sent.append((room_id, content))
        return f"$ask{len(self.sent)}"

    async def react(self, room_id, event_id, key):
        self.reactions.append((event_id, key))
        return f"$reaction{len(self.reactions)}"

    async def edit(self, room_id, event_id, content):
        self.edits.append((event_id, content))
        return f"$edit{len(self.edits)}"


class Answer:
    def __init__(self, status):
        self.status = status

    def set_status(self, status):
        self.status = status


class Shown:
    def __init__(self, body, html):
        self.body, self.html = body, html

    def content(self):
        return {"msgtype": "m.text", "body": self.body, "format": "org.matrix.custom.html", "formatted_body": self.html}


def scene(timeout: float = 60.0, refuse: bool = False):
    intent, notices = Intent(refuse), SentNotices()
    puppet = SimpleNamespace(intent=intent, displayname="Alice")
    answer = Answer("💭 thinking…")
    portal = SimpleNamespace(
        room_id=ROOM, current=SimpleNamespace(answer=answer, cancelled=False, tool_calls={}, work=None)
    )
    asks = Asks(SimpleNamespace(permission_timeout=timeout), notices, "test ask")
    return SimpleNamespace(asks=asks, intent=intent, notices=notices, puppet=puppet, answer=answer, portal=portal)


until = partial(wait_until, timeout=10.0, every=0.01)


OPTIONS = ["red", "green", "blue"]


async def chosen(ask: Ask) -> tuple[str, str]:
    option = ask.options[await ask.chosen]
    return option, f"chose {option}"


def asking(s, shown: Shown, read, timed_out: str = "", unsent: str = "", options=(), **where) -> asyncio.Task:
    """An ask of `shown` whose answer `read` reads, waiting in a task (`where`: conversation,
    asker)."""
    return asyncio.ensure_future(
        s.asks.ask(
            AskedIn(s.portal, s.puppet, **where),
            Asking(shown, WAITING, read, (timed_out, TIMED_OUT), lambda: STOPPED, unsent, options=options),
        )
    )


def numbered(s, options=OPTIONS, **where) -> asyncio.Task:
    """An ask of three numbered options, waiting in a task (`where`: conversation, asker)."""
    return asking(s, Shown("Which?", "<p>Which?</p>"), chosen, "timed out", "unsent", options=options, **where)


def worded(s, read, **where) -> asyncio.Task:
    """An ask answered in words (`read` reads its replies), waiting in a task."""
    return asking(s, Shown("Name?", "<p>Name?</p>"), read, **where)


async def test_a_numbered_answer_resolves_the_ask_and_its_message_shows_it():
    s = scene()
    task = numbered(s)
    await until(lambda: len(s.intent.reactions) == 3)
    assert s.intent.sent == [(ROOM, Shown("Which?", "<p>Which?</p>").content())]
    assert s.intent.reactions == [("$ask1", key) for key in KEYCAPS[:3]]  # one keycap per option
    assert s.answer.status == WAITING and len(s.asks.open) == 1
    assert await s.asks.on_number(ROOM, " 2. ") is True
    assert await task == "green"
    assert s.answer.status == "💭 thinking…"  # the status comes back
    assert s.asks.open == [] and s.asks.closed == {"$ask1": "chose green"}
    assert s.intent.edits == [
        (
            "$ask1",
            {
                "msgtype": "m.text",
                "body": "Which?\n\nchose green",
                "format": "org.matrix.custom.html",
                "formatted_body": "<p>Which?</p><p><strong>chose green</strong></p>",
            },
        )
    ]
    assert s.notices.said == []


async def test_an_ask_mentions_who_may_answer_it_and_its_edit_notifies_no_one():
    s = scene()
    task = numbered(s, asker="@me:hs", mention=["@me:hs"])
    await until(lambda: len(s.intent.reactions) == 3)
    [(_, sent)] = s.intent.sent
    assert sent["m.mentions"] == {"user_ids": ["@me:hs"]}
    assert sent["formatted_body"].startswith('<p><a href="https://matrix.to/#/@me:hs">')
    assert await s.asks.on_number(ROOM, "1", sender="@me:hs") is True
    assert await task == "red"
    [(_, edit)] = s.intent.edits
    assert "m.mentions" not in edit and edit["body"] == "Which?\n\nchose red"


async def test_a_wrong_number_is_refused_and_the_ask_stays_open():
    s = scene()
    task = numbered(s)
    await until(lambda: len(s.intent.reactions) == 3)
    assert await s.asks.on_number(ROOM, "4") is True  # taken, not passed on as a prompt
    assert s.notices.said == [(ROOM, "There is no option 4: answer with a number from 1 to 3.")]
    assert await s.asks.on_number(ROOM, "0") is True
    assert not task.done() and len(s.asks.open) == 1 and s.intent.edits == []
    assert await s.asks.on_number(ROOM, "no number") is False  # an ordinary message
    assert await s.asks.on_number(ROOM, "1") is True
    assert await task == "red"


async def test_a_number_answers_the_ask_it_replies_to_else_the_latest():
    s = scene()
    first = numbered(s)
    await until(lambda: len(s.intent.reactions) == 3)
    second = numbered(s)
    await until(lambda: len(s.intent.reactions) == 6)
    assert await s.asks.on_number(ROOM, "3", reply_to="$ask1") is True
    assert await first == "blue" and not second.done()
    assert await s.asks.on_number("!elsewhere:hs", "1") is False  # another room's ask is not answered
    assert await s.asks.on_number(ROOM, "1") is True  # no reply: the latest open
    assert await second == "red"


async def test_a_keycap_reaction_chooses_with_or_without_its_variation_selector():
    s = scene()
    task = numbered(s)
    await until(lambda: len(s.intent.reactions) == 3)
    assert await s.asks.on_reaction(ROOM, {"rel_type": "m.annotation", "event_id": "$other", "key": "1️⃣"}) is False
    assert await s.asks.on_reaction(ROOM, {"rel_type": "m.annotation", "event_id": "$ask1", "key": "👍"}) is False
    assert await s.asks.on_reaction(ROOM, {"rel_type": "m.annotation", "event_id": "$ask1", "key": "4️⃣"}) is False
    assert await s.asks.on_reaction(ROOM, {"rel_type": "m.reference", "event_id": "$ask1", "key": "1️⃣"}) is False
    assert not task.done()
    assert await s.asks.on_reaction(ROOM, {"rel_type": "m.annotation", "event_id": "$ask1", "key": "2\u20e3"}) is True
    assert await task == "green"
    # once chosen, another reaction decides nothing
    assert await s.asks.on_reaction(ROOM, {"rel_type": "m.annotation", "event_id": "$ask1", "key": "1️⃣"}) is False


async def test_no_answer_in_time_ends_the_ask_and_a_late_reply_is_told_it_is_closed():
    s = scene(timeout=0.05)
    assert await numbered(s) == "timed out"
    assert s.asks.open == [] and s.answer.status == "💭 thinking…"
    assert s.intent.edits[-1][1]["body"] == f"Which?\n\n{TIMED_OUT}"
    s.asks.channels = SimpleNamespace(portal_for=lambda room_id: _none())
    assert await s.asks.on_number(ROOM, "1", reply_to="$ask1") is True
    assert s.notices.said == []  # nobody to tell it in a room without a portal …
    puppet_told = scene()
    puppet_told.asks.closed["$old"] = TIMED_OUT
    portal = SimpleNamespace(current=SimpleNamespace(agent_name="alice"))
    puppet_told.asks.channels = SimpleNamespace(portal_for=lambda room_id: _value(portal))
    puppet_told.asks.identities = SimpleNamespace(puppet=lambda name: _value(puppet_told.puppet))
    assert await puppet_told.asks.on_number(ROOM, "2", reply_to="$old") is True
    assert puppet_told.notices.said == [(ROOM, f"That question is closed already: {TIMED_OUT}.")]
    assert await puppet_told.asks.on_number(ROOM, "2", reply_to="$unknown") is False


async def _none():
    return None


async def _value(value):
    return value


async def test_a_cancelled_wait_ends_the_ask_stopped_and_goes_on():
    s = scene()
    task = numbered(s)
    await until(lambda: len(s.intent.reactions) == 3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert s.asks.open == [] and s.answer.status == "💭 thinking…"
    assert s.asks.closed == {"$ask1": STOPPED}
    assert s.intent.edits[-1] == (
        "$ask1",
        {
            "msgtype": "m.text",
            "body": f"Which?\n\n{STOPPED}",
            "format": "org.matrix.custom.html",
            "formatted_body": f"<p>Which?</p><p><strong>{STOPPED}</strong></p>",
        },
    )
    assert await s.asks.on_number(ROOM, "1") is False  # nothing open any more


async def test_an_ask_cancelled_while_it_is_posted_lands_closed():
    """Withdrawn (or stopped) while the homeserver still takes its message: the message lands
    all the same, so it is shown closed at once instead of staying open in the room."""
    s = scene()
    gate = asyncio.Event()
    send = s.intent.send

    async def slow_send(room_id, content):
        await gate.wait()
        return await send(room_id, content)

    s.intent.send = slow_send
    task = numbered(s)
    await until(lambda: not task.done() and s.intent.sent == [] and s.asks.open == [])
    await asyncio.sleep(0)  # the ask is now waiting on its post
    task.cancel()
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [content["body"] for _, content in s.intent.sent] == ["Which?"]
    assert s.asks.open == [] and s.asks.closed == {"$ask1": STOPPED}
    assert s.intent.edits == [
        (
            "$ask1",
            {
                "msgtype": "m.text",
                "body": f"Which?\n\n{STOPPED}",
                "format": "org.matrix.custom.html",
                "formatted_body": f"<p>Which?</p><p><strong>{STOPPED}</strong></p>",
            },
        )
    ]
    assert s.intent.reactions == []  # no option offered on a closed ask


async def test_an_ask_that_cannot_be_posted_is_not_waited_for():
    s = scene(refuse=True)
    assert await numbered(s) == "unsent"
    assert s.asks.open == [] and s.intent.reactions == [] and s.answer.status == "💭 thinking…"


async def test_an_answer_in_words_goes_to_the_ask_that_reads_it():
    s = scene()
    read: list[str] = []

    async def in_words(ask: Ask) -> tuple[str, str]:
        while True:
            reply = await ask.replies.get()
            read.append(reply)
            if reply == "done":
                return reply, "answered"
            await s.asks.say(ask, "again")

    task = worded(s, in_words)
    await until(lambda: len(s.asks.open) == 1)
    assert s.intent.reactions == []  # no options: no keycaps
    assert await s.asks.on_words(ROOM, "hello", None, loose=False) is False  # a reply is needed
    assert await s.asks.on_words(ROOM, "hello", "$other") is False  # a reply to something else
    assert await s.asks.on_words(ROOM, "hello", "$ask1") is True
    await until(lambda: s.notices.said == [(ROOM, "again")])
    assert await s.asks.on_words(ROOM, "done", None) is True  # loose: the room's latest open ask
    assert await task == "done" and read == ["hello", "done"]
    assert s.intent.edits[-1][1]["body"] == "Name?\n\nanswered"


# ---- conversations and several owners (docs/architecture.md "Conversations and threads") ---------

ANA, BEN = "@ana:hs", "@ben:hs"
THREAD = "$root"


async def test_a_number_replying_to_nothing_answers_the_latest_ask_of_its_own_conversation():
    s = scene()
    in_thread = numbered(s, conversation=THREAD)
    await until(lambda: len(s.intent.reactions) == 3)
    in_main = numbered(s)
    await until(lambda: len(s.intent.reactions) == 6)
    assert await s.asks.on_number(ROOM, "2", conversation=THREAD) is True  # not the main timeline's, later
    assert await in_thread == "green" and not in_main.done()
    assert await s.asks.on_number(ROOM, "1", conversation="$another") is False  # none open there: a message
    assert await s.asks.on_number(ROOM, "3", reply_to="$ask2", conversation="$another") is True  # a reply names it
    assert await in_main == "blue"


async def test_another_owners_number_is_refused_in_one_line_and_changes_nothing():
    s = scene()
    task = numbered(s, conversation=THREAD, asker=ANA)
    await until(lambda: len(s.intent.reactions) == 3)
    assert await s.asks.on_number(ROOM, "1", sender=BEN, conversation=THREAD) is True  # taken, not a prompt
    assert await s.asks.on_number(ROOM, "2", reply_to="$ask1", sender=BEN, conversation=THREAD) is True
    assert await s.asks.on_number(ROOM, "9", sender=BEN, conversation=THREAD) is True  # no option told either
    refused = f"Only {ANA}, who started this turn, can answer this."
    assert s.notices.said == [(ROOM, refused)] * 3
    assert s.notices.by == [s.puppet] * 3  # the puppet that asked: its messages go into the thread
    assert not task.done() and len(s.asks.open) == 1 and s.intent.edits == []
    assert s.answer.status == WAITING  # the agent still waits
    assert await s.asks.on_number(ROOM, "2", sender=ANA, conversation=THREAD) is True
    assert await task == "green"
    assert s.notices.said == [(ROOM, refused)] * 3


async def test_another_owners_keycap_is_refused_and_the_askers_chooses():
    s = scene()
    task = numbered(s, asker=ANA)
    await until(lambda: len(s.intent.reactions) == 3)
    key = {"rel_type": "m.annotation", "event_id": "$ask1", "key": "1️⃣"}
    assert await s.asks.on_reaction(ROOM, key, BEN) is True
    assert s.notices.said == [(ROOM, f"Only {ANA}, who started this turn, can answer this.")]
    assert not task.done() and len(s.asks.open) == 1
    assert await s.asks.on_reaction(ROOM, {**key, "key": "4️⃣"}, BEN) is False  # no such option: nothing said
    assert await s.asks.on_reaction(ROOM, {**key, "key": "3️⃣"}, ANA) is True
    assert await task == "blue" and len(s.notices.said) == 1


async def test_another_owners_reply_in_words_is_refused_and_their_other_messages_are_no_answer():
    s = scene()
    read: list[str] = []

    async def in_words(ask: Ask) -> tuple[str, str]:
        read.append(await ask.replies.get())
        return read[-1], "answered"

    task = worded(s, in_words, conversation=THREAD, asker=ANA)
    await until(lambda: len(s.asks.open) == 1)
    assert await s.asks.on_words(ROOM, "Ben", "$ask1", sender=BEN, conversation=THREAD) is True
    assert s.notices.said == [(ROOM, f"Only {ANA}, who started this turn, can answer this.")]
    # replying to nothing, another owner talks in the thread: an ordinary message, not lost
    assert await s.asks.on_words(ROOM, "what is up?", None, sender=BEN, conversation=THREAD) is False
    assert await s.asks.on_words(ROOM, "Ana", None, sender=ANA) is False  # the main timeline: not this ask
    assert read == [] and not task.done()
    assert await s.asks.on_words(ROOM, "Ana", None, sender=ANA, conversation=THREAD) is True
    assert await task == "Ana" and len(s.notices.said) == 1


async def test_an_ask_nobody_started_a_turn_for_is_answered_by_any_owner():
    """A scheduled run: the agent scheduled it, and no owner's message started its turn."""
    s = scene()
    task = numbered(s, asker=None)
    await until(lambda: len(s.intent.reactions) == 3)
    assert await s.asks.on_number(ROOM, "1", sender=BEN) is True
    assert await task == "red" and s.notices.said == []


# ---- the two kinds, through the mechanism ---------------------------------------------------------


async def test_a_permission_request_is_a_numbered_ask():
    s = scene()

    def render(title, tool_call, options, known):
        return Shown(f"{title}: {tool_call['title']}", "<p>prompt</p>"), []

    permissions = Permissions(SimpleNamespace(permission_timeout=60), None, None, s.notices, render)
    request = PermissionRequest(
        "s1",
        {"toolCallId": "t1", "title": "rm -rf"},
        [{"optionId": "yes", "kind": "allow_once"}, {"optionId": "no", "kind": "reject_once"}, {"name": "no id"}],
    )
    task = asyncio.ensure_future(permissions.ask(AskedIn(s.portal, s.puppet, conversation=THREAD, asker=ANA), request))
    await until(lambda: len(s.intent.reactions) == 2)  # the option without an id is dropped
    assert s.answer.status == "🔧 waiting for your permission: rm -rf"
    assert await permissions.asks.on_number(ROOM, "1", None, BEN, THREAD) is True  # another owner: refused
    keycap = {"rel_type": "m.annotation", "event_id": "$ask1", "key": "1️⃣"}
    assert await permissions.asks.on_reaction(ROOM, keycap, BEN) is True
    assert s.notices.said == [(ROOM, f"Only {ANA}, who started this turn, can answer this.")] * 2
    assert not task.done()
    assert await permissions.asks.on_reaction(ROOM, {**keycap, "key": "2️⃣"}, ANA)
    assert await task == "no"
    assert s.intent.edits[-1][1]["body"] == "Alice: rm -rf\n\n❌ Rejected"
    assert await permissions.asks.on_number(ROOM, "1", "$ask1") is True  # closed already, said so
    assert s.answer.status == "💭 thinking…"


async def test_an_elicitation_is_an_ask_in_words():
    s = scene()
    questions = Questions(SimpleNamespace(permission_timeout=60), s.notices)
    request = parse_request(
        {
            "mode": "form",
            "message": "Your name?",
            "requestedSchema": {
                "type": "object",
                "properties": {"name": {"type": "string", "minLength": 3}},
                "required": ["name"],
            },
        }
    )
    task = asyncio.ensure_future(questions.ask(AskedIn(s.portal, s.puppet, conversation=THREAD, asker=ANA), request))
    await until(lambda: len(questions.asks.open) == 1)
    assert s.answer.status == "❓ waiting for your answer to Alice's question"
    assert await questions.asks.on_words(ROOM, "Al", None, sender=ANA) is False  # the main timeline: no answer
    assert await questions.asks.on_words(ROOM, "Bob", "$ask1", sender=BEN, conversation=THREAD) is True
    assert s.notices.said == [(ROOM, f"Only {ANA}, who started this turn, can answer this.")]
    s.notices.said.clear()
    assert await questions.asks.on_words(ROOM, "Al", None, sender=ANA, conversation=THREAD) is True
    await until(lambda: len(s.notices.said) == 1)
    assert s.notices.said[0][1].startswith("That answer does not fit:") and not task.done()
    assert await questions.asks.on_words(ROOM, "Alice", "$ask1", sender=ANA) is True
    assert await task == ElicitationAnswer(ACCEPT, {"name": "Alice"})
    assert s.intent.edits[-1][1]["body"].endswith("\n\n✅ Answered")


async def test_a_stopped_turn_declines_its_question_and_a_withdrawn_one_says_so():
    s = scene()
    questions = Questions(SimpleNamespace(permission_timeout=60), s.notices)
    request = parse_request({"mode": "url", "message": "Log in", "url": "https://example.org/x", "elicitationId": "e1"})
    for cancelled, shown in ((True, "❌ Declined (the answer was stopped)"), (False, "⏹ Withdrawn by the agent")):
        s.portal.current.cancelled = cancelled
        task = asyncio.ensure_future(questions.ask(AskedIn(s.portal, s.puppet), request))
        await until(lambda: len(questions.asks.open) == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert s.intent.edits[-1][1]["body"].endswith(f"\n\n{shown}")
    timed = Questions(SimpleNamespace(permission_timeout=0.05), s.notices)
    assert await timed.ask(AskedIn(s.portal, s.puppet), request) == ElicitationAnswer(DECLINE)
    assert s.intent.edits[-1][1]["body"].endswith("\n\n⏱ No answer: declined")


async def test_closed_already_is_said_where_the_number_was_typed():
    """A number typed in a thread, replying to a closed ask: the line goes into that thread
    (docs/architecture.md "Conversations and threads"), from the puppet of the turn running, or as a
    notice of the channel."""
    from bridge.channels.base.conversations import relation_for

    thread = relation_for("$root", "$typed")
    s = scene()
    s.asks.closed["$old"] = TIMED_OUT
    sent: list = []

    async def send(puppet, room_id, text, html=None):
        sent.append((getattr(puppet.intent, "relates_to", None), text))

    s.notices.send = send
    portal = SimpleNamespace(current=SimpleNamespace(agent_name="alice"))
    s.asks.channels = SimpleNamespace(portal_for=lambda room_id: _value(portal))
    s.asks.identities = SimpleNamespace(puppet=lambda name: _value(s.puppet))
    assert await s.asks.on_number(ROOM, "2", reply_to="$old", relates_to=thread) is True
    assert sent == [(thread, f"That question is closed already: {TIMED_OUT}.")]
    # no turn running: a notice of the channel, into the thread too
    told: list = []

    async def in_channel(room_id, members, text, puppet=None, relates_to=None):
        told.append((relates_to, text))

    s.notices.in_channel = in_channel
    portal.current, portal.room_id, portal.member_names = None, ROOM, lambda: ["alice"]
    assert await s.asks.on_number(ROOM, "1", reply_to="$old", relates_to=thread) is True
    assert told == [(thread, f"That question is closed already: {TIMED_OUT}.")]
