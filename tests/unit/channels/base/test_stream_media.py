"""bridge/channels/base/stream.py: MSC4357's live marker while an answer streams, and an agent's media in the
answer's place (in order with its text), against a recording stand-in for the Intent."""

from __future__ import annotations

import asyncio

from fake_intent import FakeIntent

from bridge.channels.base.stream import LIVE, Answer, message_content

ROOM = "!room:localhost"


async def test_a_streamed_answer_is_live_until_its_final_edit():
    intent = FakeIntent()
    answer = Answer(intent, ROOM, "Alice")
    await answer.post()
    answer.append("Hello")

    async def first_edit():  # the placeholder, then the edit with the first part
        while len(intent.events) < 2:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(first_edit(), 60)
    await answer.finish()
    first, *edits, final = intent.events
    assert first[0] == "send" and first[2][LIVE] == {}
    assert edits and all(content[LIVE] == {} for _, _, content in edits)
    assert final[0] == "edit" and LIVE not in final[2] and final[2]["body"] == "Hello"


async def test_an_answer_posted_once_final_carries_no_live_marker():
    intent = FakeIntent()
    answer = Answer(intent, ROOM, "Alice")
    posting = answer.post(grace=5.0)
    answer.append("Quick")
    await answer.finish()
    await posting
    assert len(intent.events) == 1
    kind, _, content = intent.events[0]
    assert kind == "send" and content["body"] == "Quick" and LIVE not in content


def test_message_content_marks_live_only_when_asked():
    assert LIVE not in message_content("x", None)
    assert message_content("x", "✍️ writing…", live=True)[LIVE] == {}


async def test_media_goes_between_the_text_before_and_after_it():
    intent = FakeIntent()
    answer = Answer(intent, ROOM, "Alice")
    await answer.post()
    posted = []

    async def send_image():
        event_id = await intent.send(ROOM, {"msgtype": "m.image", "body": "dot.png"})
        posted.append(event_id)
        return event_id

    answer.append("Here is the image:")
    answer.add_media(send_image, "[image: dot.png]")
    answer.append("That is all.")
    ids = await answer.finish()
    sends = [(target, content) for kind, target, content in intent.events if kind == "send"]
    bodies = [content["body"] for _, content in sends]
    # the placeholder (then closed with the text before the image), the image, a new message
    assert bodies[1] == "dot.png" and sends[1][1]["msgtype"] == "m.image"
    placeholder, after = sends[0][0], sends[2][0]
    last_edit = {target: content for kind, target, content in intent.events if kind == "edit"}
    assert last_edit[placeholder]["body"] == "Here is the image:" and LIVE not in last_edit[placeholder]
    shown_after = last_edit.get(after, sends[2][1])["body"]
    assert shown_after == "That is all."
    assert answer.full_text == "Here is the image:\n[image: dot.png]\nThat is all."
    assert set(ids) == {placeholder, posted[0], after}


async def test_media_at_the_end_leaves_no_empty_message_after_it():
    intent = FakeIntent()
    answer = Answer(intent, ROOM, "Alice")
    await answer.post()

    async def send_image():
        return await intent.send(ROOM, {"msgtype": "m.image", "body": "dot.png"})

    answer.append("Look:")
    answer.add_media(send_image, "[image: dot.png]")
    await answer.finish()
    sends = [content for kind, _, content in intent.events if kind == "send"]
    assert [c.get("msgtype") for c in sends] == ["m.text", "m.image"]
    assert "(no answer)" not in str(intent.texts())


async def test_media_first_turns_the_placeholder_into_its_name_and_a_failed_post_is_said():
    intent = FakeIntent()
    answer = Answer(intent, ROOM, "Alice")
    await answer.post()

    async def fails():
        raise RuntimeError("upload refused")

    answer.add_media(fails, "[image: dot.png]")
    answer.append("Done.")
    await answer.finish()
    placeholder = intent.events[0][1]
    edits = [content["body"] for kind, target, content in intent.events if kind == "edit" and target == placeholder]
    assert edits[-1] == "[image: dot.png]"
    final_texts = [content["body"] for kind, target, content in intent.events if target != placeholder]
    assert any("⚠️ [image: dot.png] could not be posted: upload refused" in t and "Done." in t for t in final_texts)
