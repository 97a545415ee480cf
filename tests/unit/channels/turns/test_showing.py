"""bridge/channels/turns/showing.py: what the owner sees of a turn while its agent works — the status
line for each kind of update, text and media going into the answer, the plan and tool calls
handed to the work display, notices, "thinking" when the agent is slow, typing — against
stand-ins of the answer, the work display and the puppet (no I/O)."""

from __future__ import annotations

import asyncio
import base64
from functools import partial
from types import SimpleNamespace

from bridge_harness import wait_until
from scene_helpers import SentNotices

from acp import Update
from bridge.channels.turns import showing
from bridge.channels.turns.showing import STATUS_THINKING, STATUS_WRITING, Showing, tool_status

ROOM = "!room:hs"


class Answer:
    def __init__(self):
        self.status, self.text, self.media = "⏳ getting ready…", "", []

    def set_status(self, status):
        self.status = status

    def append(self, chunk):
        self.text += chunk

    def add_media(self, send, tag):
        self.media.append((send, tag))


class Work:
    def __init__(self, fails=False):
        self.updates, self.closed, self.fails = [], 0, fails

    def update(self, update):
        self.updates.append(update)
        return True

    async def close(self):
        self.closed += 1
        if self.fails:
            raise RuntimeError("the homeserver is gone")


class Intent:
    def __init__(self):
        self.typing_calls: list[bool] = []

    async def typing(self, room_id, on):
        self.typing_calls.append(on)


def scene(work=None):
    answer, work, notices = Answer(), work or Work(), SentNotices()
    puppet = SimpleNamespace(intent=Intent())
    tool_calls: dict[str, dict] = {}
    courtesies: list = []

    def note_tool_call(update):
        known = tool_calls.setdefault(update.tool_call_id or "", {})
        if update.title:
            known["title"] = update.title
        return known

    def courtesy(coroutine):
        courtesies.append(asyncio.ensure_future(coroutine))

    shown = Showing(
        answer,
        work,
        puppet,
        ROOM,
        notices=notices,
        attachment_bytes=1000,
        media_roots=lambda: [],
        courtesy=courtesy,
        note_tool_call=note_tool_call,
    )
    return SimpleNamespace(
        showing=shown, answer=answer, work=work, notices=notices, puppet=puppet, courtesies=courtesies
    )


until = partial(wait_until, timeout=10.0, every=0.01)


def test_each_update_shows_in_the_status_line_and_the_answer():
    s = scene()
    s.showing.on_update(Update("thought", text="hmm"))
    assert s.answer.status == STATUS_THINKING and s.answer.text == ""
    s.showing.on_update(Update("text", text="Hello", raw={"content": {"type": "text", "text": "Hello"}}))
    assert s.answer.status == STATUS_WRITING and s.answer.text == "Hello"
    s.showing.on_update(Update("tool_call", tool_call_id="c1", title="Edit main.py", status="pending"))
    assert s.answer.status == tool_status("Edit main.py") == "🔧 using a tool: Edit main.py"
    # an update that names no title: the title the turn knows of the call
    s.showing.on_update(Update("tool_call_update", tool_call_id="c1", status="in_progress"))
    assert s.answer.status == tool_status("Edit main.py")
    s.showing.on_update(Update("tool_call_update", tool_call_id="c1", status="completed"))
    assert s.answer.status == STATUS_THINKING
    s.showing.on_update(Update("tool_call", tool_call_id="c2", status="pending"))
    assert s.answer.status == "🔧 using a tool: a tool"
    plan = Update("plan")
    s.showing.on_update(plan)
    assert [u.kind for u in s.work.updates] == [
        "tool_call",
        "tool_call_update",
        "tool_call_update",
        "tool_call",
        "plan",
    ]
    assert s.work.updates[-1] is plan


async def test_a_notice_is_a_line_in_the_room_and_a_media_part_is_added_to_the_answer():
    s = scene()
    s.showing.on_update(Update("notice", text="too many questions"))
    s.showing.on_update(Update("notice", text=""))  # nothing to say: nothing said
    await asyncio.gather(*s.courtesies)
    assert s.notices.said == [(ROOM, "⚠️ too many questions")]
    image = {"type": "image", "mimeType": "image/png", "data": base64.b64encode(b"\x89PNG").decode()}
    s.showing.on_update(Update("text", raw={"content": image}))
    assert len(s.answer.media) == 1 and s.answer.text == "" and s.answer.status == STATUS_WRITING
    broken = {"type": "image", "mimeType": "image/png", "data": "not base64!"}
    s.showing.on_update(Update("text", raw={"content": broken}))
    assert s.answer.text == "[an image that could not be read]"  # said in the text instead


async def test_thinking_shows_when_the_agent_is_slow_and_not_after_its_first_part(monkeypatch):
    monkeypatch.setattr(showing, "THINKING_AFTER", 0.01)
    s = scene()
    s.showing.prompting(lambda: False)
    try:
        await until(lambda: s.answer.status == STATUS_THINKING)
    finally:
        s.showing.prompted()
    quick = scene()
    quick.showing.prompting(lambda: False)
    try:
        quick.showing.on_update(Update("text", text="Hi", raw={"content": {"type": "text", "text": "Hi"}}))
        assert quick.showing._think.cancelled()  # the first part cancels "thinking"
    finally:
        quick.showing.prompted()
    assert quick.answer.status == STATUS_WRITING


async def test_thinking_never_covers_a_question_to_the_owner(monkeypatch):
    # the agent asks the owner before its first part: the answer's status says it waits for
    # the owner (asks.py), and a slow start's "thinking" coming after must not replace it
    monkeypatch.setattr(showing, "THINKING_AFTER", 0.01)
    asked, control = scene(), scene()
    asked.showing.prompting(lambda: True)
    asked.answer.set_status("🔧 waiting for your permission: Write notes.txt")
    control.showing.prompting(lambda: False)  # its timer is due after the asked one's
    try:
        await until(lambda: control.answer.status == STATUS_THINKING)
        assert asked.answer.status == "🔧 waiting for your permission: Write notes.txt"
    finally:
        asked.showing.prompted()
        control.showing.prompted()


async def test_typing_goes_on_once_the_first_message_is_out_and_off_at_the_end(monkeypatch):
    monkeypatch.setattr(showing, "TYPING_AFTER", 0)
    s = scene()
    posting = asyncio.get_running_loop().create_future()
    s.showing.typing_after(posting)
    for _ in range(5):  # the typing task runs up to its wait for the first message
        await asyncio.sleep(0)
    assert s.puppet.intent.typing_calls == []  # the first message is not out yet
    posting.set_result("$answer")
    await until(lambda: s.puppet.intent.typing_calls == [True])
    s.showing.prompted()
    await s.showing.typing_ended()
    assert s.puppet.intent.typing_calls == [True, False]


async def test_a_quick_turn_never_types(monkeypatch):
    monkeypatch.setattr(showing, "TYPING_AFTER", 60)
    s = scene()
    posting = asyncio.get_running_loop().create_future()
    posting.set_result("$answer")
    s.showing.typing_after(posting)
    s.showing.prompted()
    await s.showing.typing_ended()
    assert s.puppet.intent.typing_calls == []
    await scene().showing.typing_ended()  # a turn that never got to type: nothing to end


async def test_the_work_display_closes_even_when_it_fails():
    s = scene(Work(fails=True))
    await s.showing.work_shown()  # logged, not raised: the turn goes on to its end
    assert s.work.closed == 1


def test_a_message_sent_again_by_its_message_id_never_doubles_the_text():
    s = scene()

    def chunk(text, message_id=None):
        raw = {"content": {"type": "text", "text": text}}
        if message_id is not None:
            raw["messageId"] = message_id
        s.showing.on_update(Update("text", text=text, raw=raw))

    chunk("Hello ", "m1")
    chunk("world. ", "m1")  # the same message goes on
    chunk("Next. ", "m2")  # a new one begins
    chunk("Hello world. ", "m1")  # the first again, whole: not added
    chunk("More. ", "m2")
    chunk("No id. ")  # chunks without an id are always added
    assert s.answer.text == "Hello world. Next. More. No id. "


def test_usage_is_a_note_after_the_status():
    s = scene()
    notes = {}
    s.answer.set_note = lambda key, note: notes.__setitem__(key, note)
    from acp.session_state import Usage

    s.showing.on_update(Update("usage", usage=Usage(1500, 200_000, 0.5, "USD")))
    assert notes == {"usage": "context 1.5k/200k · $0.50"}
