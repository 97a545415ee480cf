"""stream.Answer against a fake Intent: a send that fails while an answer splits into a new
message, and a homeserver that takes no final text."""

from __future__ import annotations

import pytest
from fake_intent import FakeIntent

from bridge.channels.base import stream
from bridge.channels.base.stream import SPLIT_WEIGHT, Answer, AnswerNotFinished
from bridge.matrix.client import MatrixError
from bridge.matrix.intent import EventTooLarge, weight


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(stream, "BASE_INTERVAL", 0.01)
    monkeypatch.setattr(stream, "FINAL_RETRY", 0.01)
    monkeypatch.setattr(stream, "FINAL_PATIENCE", 0.05)


async def stream_long_answer(answer: Answer, size: int = 2 * SPLIT_WEIGHT + 5000) -> str:
    await answer.start()
    text = ""
    line = "word " * 19 + "\n"
    while len(text) < size:
        answer.append(line)
        text += line
        answer._dirty.set()
        await stream.asyncio.sleep(0.002)
    return text


async def test_a_failed_send_while_an_answer_splits_loses_nothing():
    # the second new message (the first split) fails once; the next edit sends it
    intent = FakeIntent(fail=lambda kind, n: kind == "send" and n == 2)
    answer = Answer(intent, "!r", "Alice")
    text = await stream_long_answer(answer)
    event_ids = await answer.finish()
    assert answer.finished and event_ids == list(intent.messages)
    assert len(event_ids) == 3 and intent.calls["send"] == 4  # the failed one was sent again
    shown = intent.shown()
    assert not any(body.startswith(("✍️", "⏳", "💭")) for body in shown)
    assert "".join(shown) == answer.full_text == text
    assert all(weight(body) <= SPLIT_WEIGHT for body in shown)


async def test_a_failed_close_of_a_full_message_is_tried_again():
    # closing the first message (its edit at the split) fails a few times
    intent = FakeIntent(fail=lambda kind, n: kind == "edit" and 3 <= n <= 5)
    answer = Answer(intent, "!r", "Alice")
    text = await stream_long_answer(answer)
    await answer.finish()
    assert answer.finished and "".join(intent.shown()) == text


async def test_an_answer_whose_final_text_is_refused_is_not_finished():
    intent = FakeIntent(fail=lambda kind, n: n > 1)  # only the placeholder got through
    answer = Answer(intent, "!r", "Alice")
    await stream_long_answer(answer, size=5000)
    with pytest.raises(AnswerNotFinished):
        await answer.finish()
    assert not answer.finished


async def test_a_final_text_refused_while_the_homeserver_is_away_is_sent_once_it_is_back(monkeypatch):
    # its database restarting, the homeserver answers 5xx for longer than FINAL_ATTEMPTS: the
    # final text is sent again until it is taken (docs/outages.md), not left with its status
    monkeypatch.setattr(stream, "FINAL_PATIENCE", 30)
    back = stream.asyncio.Event()
    intent = FakeIntent(fail=lambda kind, n: kind == "edit" and not back.is_set())
    answer = Answer(intent, "!r", "Alice")
    await answer.start()
    answer.append("the whole answer")
    finishing = stream.asyncio.ensure_future(answer.finish())
    while intent.calls["edit"] <= 2 * stream.FINAL_ATTEMPTS and not finishing.done():
        await stream.asyncio.sleep(0.005)
    assert not finishing.done() and not answer.finished
    back.set()
    assert await finishing == list(intent.messages)
    assert answer.finished and intent.shown() == ["the whole answer"]


async def test_a_final_text_the_homeserver_refuses_for_good_is_not_sent_again_and_again(monkeypatch):
    monkeypatch.setattr(stream, "FINAL_PATIENCE", 30)
    intent = FakeIntent()
    answer = Answer(intent, "!r", "Alice")
    await answer.start()
    answer.append("the whole answer")

    async def forbidden(room_id, event_id, new_content, *, txn_id=None):
        intent.calls["edit"] += 1
        raise MatrixError("sending: M_FORBIDDEN not in the room", 403)

    intent.edit = forbidden
    with pytest.raises(AnswerNotFinished):
        await answer.finish()
    assert intent.calls["edit"] == stream.FINAL_ATTEMPTS and not answer.finished


async def test_a_quick_answer_posted_final_is_finished():
    intent = FakeIntent()
    answer = Answer(intent, "!r", "Alice")
    posting = answer.post(grace=1.0)
    answer.append("hello")
    assert await answer.finish() == list(intent.messages) and posting.done()
    assert answer.finished and intent.shown() == ["hello"] and intent.calls["edit"] == 0


async def test_a_reused_placeholder_is_edited_to_the_answer_never_posted_final():
    # the transaction id given again returns the old placeholder unchanged (recovery.py): the
    # answer must be an edit of it, even when it ends within the grace
    intent = FakeIntent()
    answer = Answer(intent, "!r", "Alice")
    answer.reused = True
    posting = answer.post(grace=1.0)
    answer.append("hello")
    assert await answer.finish() == list(intent.messages) and posting.done()
    assert answer.finished and intent.shown() == ["hello"] and intent.calls["edit"] >= 1


class LosingIntent(FakeIntent):
    """A homeserver that keeps each transaction id's event (as Synapse does) and, when told,
    takes a send but loses its answer (killed before it replied)."""

    def __init__(self, lose_sends: set[int]):
        super().__init__()
        self.lose_sends = lose_sends
        self.by_txn: dict[str, str] = {}

    async def send(self, room_id, content, *, event_type="m.room.message", txn_id=None):
        self.calls["send"] += 1
        if txn_id in self.by_txn:
            return self.by_txn[txn_id]  # the same event again, its content unchanged
        event_id = f"$m{len(self.messages) + 1}"
        self.messages[event_id] = [content]
        if txn_id is not None:
            self.by_txn[txn_id] = event_id
        if self.calls["send"] in self.lose_sends:
            raise MatrixError("sending: the connection was lost", 502)
        return event_id


async def test_a_new_message_whose_answer_was_lost_is_not_posted_twice():
    # the split's new message lands, its answer is lost; the next try must not post another
    intent = LosingIntent(lose_sends={2})
    answer = Answer(intent, "!r", "Alice")
    text = await stream_long_answer(answer, size=SPLIT_WEIGHT + 3000)
    await answer.finish()
    assert len(intent.messages) == 2 and answer.finished
    assert "".join(intent.shown()) == text  # the retried message shows its latest text, not the first


async def test_a_placeholder_whose_answer_was_lost_is_the_answers_message():
    intent = LosingIntent(lose_sends={1})
    answer = Answer(intent, "!r", "Alice")
    posting = answer.post()
    answer.append("hello")
    await answer.finish()
    assert posting.done() and len(intent.messages) == 1 and intent.shown() == ["hello"] and answer.finished


class SmallEvents(FakeIntent):
    """A homeserver (or an encryption) on which a message over `limit` in weight does not fit:
    the Intent refuses it (EventTooLarge) before sending, as intent.Intent does."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit
        self.refused = 0

    def _check(self, content):
        if weight(content["body"]) > self.limit:
            self.refused += 1
            raise EventTooLarge("m.room.message", 70_000)

    async def send(self, room_id, content, *, event_type="m.room.message", txn_id=None):
        self._check(content)
        return await super().send(room_id, content, event_type=event_type, txn_id=txn_id)

    async def edit(self, room_id, event_id, new_content, *, txn_id=None):
        self._check(new_content)
        return await super().edit(room_id, event_id, new_content, txn_id=txn_id)


async def test_an_event_that_does_not_fit_makes_the_answer_split_smaller_at_once():
    intent = SmallEvents(limit=3_000)
    answer = Answer(intent, "!r", "Alice")
    text = await stream_long_answer(answer, size=20_000)
    await answer.finish()
    assert answer.finished and intent.refused > 0
    shown = intent.shown()
    assert "".join(shown) == text == answer.full_text  # nothing lost, nothing twice
    assert all(weight(body) <= 3_000 for body in shown) and len(shown) >= 7


async def test_an_answer_past_the_total_cap_ends_with_a_line_saying_it_was_cut():
    intent = FakeIntent()
    answer = Answer(intent, "!r", "Alice")
    await answer.start()
    line = ("0123456789abcdef" * 4 + "\n") * 1024  # 65 KiB, as an agent might flood
    for _ in range(8 * 16):  # 8 MiB
        answer.append(line)
    await answer.finish()
    assert answer.finished and answer.cut
    full = answer.full_text
    assert full.endswith(stream.CUT_LINE) and "".join(intent.shown()) == full
    assert stream.MAX_ANSWER_BYTES <= len(full.encode()) <= stream.MAX_ANSWER_BYTES + 200
    # about 1 MiB in messages of SPLIT_WEIGHT: ~70, not the ~560 of 8 MiB
    assert len(intent.messages) <= stream.MAX_ANSWER_BYTES // (SPLIT_WEIGHT // 2)


async def test_a_status_that_comes_back_before_the_next_edit_sends_no_edit_of_the_same():
    """A → B → A between two edits (seen with OpenCode under load: "waiting for your permission",
    a tool, the same wait again): the message already shows A, so nothing is sent; every state
    the message shows differs from the one before."""
    intent = FakeIntent()
    answer = Answer(intent, "!r", "Alice")
    answer.set_status("🔧 waiting for your permission")
    await answer.start()
    answer.set_status("🔧 using a tool: write")
    answer.set_status("🔧 waiting for your permission")  # back before the edit loop ran
    for _ in range(20):
        await stream.asyncio.sleep(0.02)  # the edit loop's turns (BASE_INTERVAL is 0.01 here)
    assert intent.calls["edit"] == 0
    answer.set_status("💭 thinking…")
    for _ in range(50):
        if intent.calls["edit"]:
            break
        await stream.asyncio.sleep(0.02)
    answer.append("done")
    await answer.finish()
    [history] = intent.messages.values()
    bodies = [content["body"] for content in history]
    assert all(a != b for a, b in zip(bodies, bodies[1:])), bodies
    assert bodies[0].startswith("🔧 waiting") and "💭 thinking…" in bodies[1] and bodies[-1] == "done"
