"""Attachments both ways, end to end (docs/architecture.md "Streaming, permissions and cancel"):
the owner's images and files reach the agent as the ACP content it announced, an agent's
image comes back as an m.image, size limits, and the other message kinds.

Real Synapse, the owner's matrix-nio client, the real bridge in-process, scripted agents that log
every JSON-RPC message they receive (`--log`) and announce what they take (`--prompt-caps`).
"""

from __future__ import annotations

import base64
import io
import struct
import zlib
from urllib.parse import urlparse

import aiohttp
import nio
from bridge_harness import agent, answers_in
from helpers import is_final, joined, open_dm, received
from matrix_helpers import caught_up, events_in, sync_until

ALICE = "@sk_alice:localhost"


def png(width: int = 2, height: int = 2, extra: int = 0) -> bytes:
    """A real PNG image (`extra` bytes of text chunk make it bigger)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + (chunk(b"tEXt", b"pad\x00" + b"x" * extra) if extra else b"")
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def prompts(log_path) -> list[list[dict]]:
    """The content blocks of every session/prompt the agent received, in order."""
    return [m["params"]["prompt"] for m in received(log_path) if m.get("method") == "session/prompt"]


async def upload(owner, data: bytes, mimetype: str, name: str) -> str:
    response, _ = await owner.upload(io.BytesIO(data), content_type=mimetype, filename=name, filesize=len(data))
    assert isinstance(response, nio.UploadResponse), response
    return response.content_uri


async def send(owner, room_id: str, content: dict, event_type: str = "m.room.message") -> str:
    response = await owner.room_send(room_id, event_type, content)
    assert isinstance(response, nio.RoomSendResponse), response
    return response.event_id


async def send_file(
    owner,
    room_id: str,
    data: bytes,
    mimetype: str,
    name: str,
    caption: str | None = None,
    msgtype: str = "m.image",
    size: int | None = None,
) -> str:
    content = {
        "msgtype": msgtype,
        "body": caption or name,
        "url": await upload(owner, data, mimetype, name),
        "info": {"mimetype": mimetype, "size": len(data) if size is None else size},
    }
    if caption:
        content["filename"] = name
    return await send(owner, room_id, content)


def messages(owner, room_id, sender=ALICE) -> list[dict]:
    return answers_in(events_in(owner, room_id), sender)


async def wait_messages(owner, room_id, count: int, sender=ALICE) -> list[dict]:
    def done():
        found = messages(owner, room_id, sender)
        return len(found) >= count and all(is_final(m) for m in found[:count])

    await sync_until(owner, done)
    return messages(owner, room_id, sender)


async def download(homeserver, owner, mxc: str) -> bytes:
    server_media = urlparse(mxc)
    url = f"{homeserver.url}/_matrix/client/v1/media/download/{server_media.netloc}{server_media.path}"
    async with aiohttp.ClientSession() as http:
        async with http.get(url, headers={"Authorization": f"Bearer {owner.access_token}"}) as response:
            assert response.status == 200, await response.text()
            return await response.read()


# ---- owner → agent ------------------------------------------------------------------------------


async def test_an_image_with_and_without_caption_reaches_the_agent_as_an_image_block(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": agent("--log", str(log), "--prompt-caps", "image", "--answer", "seen")})
    room = await open_dm(owner)
    image = png()
    await send_file(owner, room, image, "image/png", "dot.png")
    await wait_messages(owner, room, 1)
    await send_file(owner, room, image, "image/png", "dot.png", caption="what colour is this?")
    await wait_messages(owner, room, 2)
    await running.idle()
    first, second = prompts(log)
    encoded = base64.b64encode(image).decode()
    sent = f"[The user sent you an image: dot.png, image/png, {len(image)} bytes]"
    # alone, the prompt says the owner sent it and that the answer is about it (frame lines)
    assert first == [
        {"type": "text", "text": f"{sent}\n[No text came with it: answer about the file itself.]"},
        {"type": "image", "mimeType": "image/png", "data": encoded},
    ]
    assert second[0]["type"] == "text" and second[0]["text"].endswith("what colour is this?")
    assert second[1:] == [{"type": "text", "text": sent}, {"type": "image", "mimeType": "image/png", "data": encoded}]
    stored = [
        m.text for m in running.store.last_messages(running.store.channel_by_room(room).id, 10) if m.role == "user"
    ]
    assert stored == ["[image: dot.png]", "[image: dot.png] what colour is this?"]


async def test_a_text_file_is_an_embedded_resource_or_its_text(bridge_factory, tmp_path, owner):
    alice_log, bob_log = tmp_path / "alice.log", tmp_path / "bob.log"
    running = await bridge_factory(
        {
            "alice": agent("--log", str(alice_log), "--prompt-caps", "embeddedContext", "--answer", "read"),
            "bob": agent("--log", str(bob_log), "--answer", "read"),
        }
    )
    text = "def add(a, b):\n    return a + b  # é\n"
    alice_room = await open_dm(owner, ALICE)
    event_id = await send_file(owner, alice_room, text.encode(), "text/x-python", "add.py", msgtype="m.file")
    bob_room = await open_dm(owner, "@sk_bob:localhost")
    await send_file(owner, bob_room, text.encode(), "text/x-python", "add.py", caption="review this", msgtype="m.file")
    await wait_messages(owner, alice_room, 1)
    await wait_messages(owner, bob_room, 1, sender="@sk_bob:localhost")
    await running.idle()
    (alice_prompt,), (bob_prompt,) = prompts(alice_log), prompts(bob_log)
    size = len(text.encode())
    sent = f"[The user sent you a file: add.py, text/x-python, {size} bytes]"
    assert alice_prompt[0] == {"type": "text", "text": f"{sent}\n[No text came with it: answer about the file itself.]"}
    assert alice_prompt[1] == {"type": "text", "text": "[file: add.py]"}
    resource = alice_prompt[2]["resource"]
    assert alice_prompt[2]["type"] == "resource" and resource["text"] == text
    assert resource["mimeType"] == "text/x-python" and resource["uri"].startswith("mxc://localhost/")
    assert [b["type"] for b in bob_prompt] == ["text", "text", "text"]
    assert bob_prompt[0]["text"].endswith("review this")
    assert bob_prompt[1]["text"] == sent  # with a caption: no line asking to answer about the file
    assert bob_prompt[2]["text"] == f"[Contents of add.py]\n{text}\n[End of add.py]"
    assert running.store.message_by_event(event_id).text == "[file: add.py]"


async def test_an_agent_without_image_support_gets_one_line_and_no_prompt(bridge_factory, tmp_path, owner):
    log = tmp_path / "local.log"
    running = await bridge_factory({"local": agent("--log", str(log), title="Local model")})
    puppet = "@sk_local:localhost"
    room = await open_dm(owner, puppet)
    await send_file(owner, room, png(), "image/png", "dot.png", caption="what is it?")
    (line,) = await wait_messages(owner, room, 1, sender=puppet)
    await running.idle()
    assert line["body"] == "⚠️ Local model cannot look at images, so dot.png was not passed on."
    assert prompts(log) == []  # no prompt, with or without the image
    channel = running.store.channel_by_room(room)
    assert [m.role for m in running.store.last_messages(channel.id, 10)] == ["user"]  # the line is not an answer


async def test_attachments_past_the_size_limit_get_a_clear_line(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    running = await bridge_factory(
        {"alice": agent("--log", str(log), "--prompt-caps", "image")}, limits={"attachment_mib": 0.01}
    )  # 10 KiB
    room = await open_dm(owner)
    big = png(extra=20 * 1024)
    declared = await send_file(owner, room, big, "image/png", "big.png")
    await sync_until(owner, lambda: any("big.png is 20 KiB" in m["body"] for m in messages(owner, room)))
    # a message that says it is small: the download stops at the limit
    await send_file(owner, room, big, "image/png", "liar.png", size=100)
    await wait_messages(owner, room, 2)
    await running.idle()
    bodies = [m["body"] for m in messages(owner, room)]
    assert bodies == [
        "big.png is 20 KiB; agents take attachments of up to 10 KiB (limits.attachment_mib), so it was not passed on.",
        "⚠️ liar.png is bigger than the 10 KiB agents take (limits.attachment_mib), so it was not passed on.",
    ]
    assert prompts(log) == []
    assert running.store.message_by_event(declared) is None  # refused at once: not a prompt


async def test_other_message_kinds_do_what_the_readme_says(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": agent("--log", str(log), "--answer", "ok")})
    room = await open_dm(owner)
    await send(owner, room, {"msgtype": "m.emote", "body": "waves"})
    await wait_messages(owner, room, 1)
    await send(owner, room, {"msgtype": "m.location", "body": "Big Ben", "geo_uri": "geo:51.5007,-0.1246"})
    await wait_messages(owner, room, 2)
    await send(
        owner,
        room,
        {
            "org.matrix.msc3381.poll.start": {
                "question": {"org.matrix.msc1767.text": "Lunch?"},
                "kind": "org.matrix.msc3381.poll.disclosed",
                "max_selections": 1,
                "answers": [
                    {"id": "a", "org.matrix.msc1767.text": "Pizza"},
                    {"id": "b", "org.matrix.msc1767.text": "Soup"},
                ],
            },
            "org.matrix.msc1767.text": "Lunch?\n1. Pizza\n2. Soup",
        },
        event_type="org.matrix.msc3381.poll.start",
    )
    await wait_messages(owner, room, 3)
    sticker = await upload(owner, png(), "image/png", "sticker.png")
    await send(
        owner, room, {"body": "thumbs up", "url": sticker, "info": {"mimetype": "image/png"}}, event_type="m.sticker"
    )
    await wait_messages(owner, room, 4)
    notice = await send(owner, room, {"msgtype": "m.notice", "body": "build finished"})
    await running.handled(notice)
    await running.idle()
    await caught_up(owner, room)
    texts = [p[0]["text"] for p in prompts(log)]
    assert texts == ["*waves*", "[location: Big Ben] geo:51.5007,-0.1246", "[poll] Lunch?\n1. Pizza\n2. Soup"]
    shown = messages(owner, room)
    assert shown[3]["body"] == "⚠️ alice cannot look at images, so the sticker “thumbs up” was not passed on."
    assert len(shown) == 4  # the notice: not passed on, not answered


# ---- agent → owner ------------------------------------------------------------------------------


async def test_an_agents_image_comes_back_as_an_m_image_with_the_same_bytes(
    homeserver, bridge_factory, tmp_path, owner
):
    image = png(3, 3)
    picture = tmp_path / "red.png"
    picture.write_bytes(image)
    running = await bridge_factory({"alice": agent("--reply-image", str(picture))})
    room = await open_dm(owner)
    prompt = await send(owner, room, {"msgtype": "m.text", "body": "draw a red square"})
    await running.handled(prompt)
    await running.idle()
    await caught_up(owner, room)
    shown = messages(owner, room)
    assert [(m["msgtype"], m["body"]) for m in shown] == [
        ("m.text", "Here is the image:"),
        ("m.image", "image.png"),
        ("m.text", "That is all."),
    ]
    event = next(e for e in events_in(owner, room) if e["event_id"] == shown[1]["event_id"])
    assert event["content"]["info"] == {"mimetype": "image/png", "size": len(image)}
    assert await download(homeserver, owner, event["content"]["url"]) == image
    channel = running.store.channel_by_room(room)
    answer = [m for m in running.store.last_messages(channel.id, 10) if m.role == "agent"]
    assert answer[0].text == "Here is the image:\n[image: image.png]\nThat is all."
    assert set(answer[0].event_ids) == {m["event_id"] for m in shown}
    assert running.store.message_by_event(prompt) is not None


async def test_an_agents_file_resource_comes_back_as_an_m_file(homeserver, bridge_factory, tmp_path, owner):
    plan = tmp_path / "plan.md"
    plan.write_text("# Plan\n- one\n")
    running = await bridge_factory({"alice": agent("--reply-resource", str(plan))})
    room = await open_dm(owner)
    await running.handled(await send(owner, room, {"msgtype": "m.text", "body": "write a plan"}))
    await running.idle()
    await caught_up(owner, room)
    shown = messages(owner, room)
    assert [(m["msgtype"], m["body"]) for m in shown] == [("m.text", "Here is the file:"), ("m.file", "plan.md")]
    event = next(e for e in events_in(owner, room) if e["event_id"] == shown[1]["event_id"])
    assert await download(homeserver, owner, event["content"]["url"]) == b"# Plan\n- one\n"


async def test_an_attachment_left_unanswered_by_a_stop_reaches_the_next_agent_after_the_restart(
    bridge_factory, tmp_path, owner
):
    """The store keeps "[image: dot.png] caption"; the next start reads the event again, so the
    agent whose turn had not begun still gets the image and the caption (not the stored text)."""
    release = tmp_path / "release"
    alice_log, bob_log = tmp_path / "alice.log", tmp_path / "bob.log"
    agents = {
        "alice": agent("--log", str(alice_log), "--prompt-caps", "image", "--hold", str(release)),
        "bob": agent("--log", str(bob_log), "--prompt-caps", "image", "--answer", "a dot"),
    }
    folder = tmp_path / "bridge"
    running = await bridge_factory(agents, folder=folder)
    made = await owner.room_create(name="pics", invite=[ALICE, "@sk_bob:localhost"], preset=nio.RoomPreset.private_chat)
    assert isinstance(made, nio.RoomCreateResponse), made
    room = made.room_id
    await sync_until(owner, lambda: joined(owner, room, ALICE) and joined(owner, room, "@sk_bob:localhost"))
    image = png()
    await send_file(owner, room, image, "image/png", "dot.png", caption="@alice @bob what is this?")
    await wait_until_prompted(alice_log)  # alice holds her answer: bob's turn has not begun
    await running.stop()
    assert prompts(bob_log) == []

    release.touch()
    running = await bridge_factory(agents, folder=folder)
    await wait_until_prompted(bob_log)
    await running.idle()
    (bob_prompt,) = prompts(bob_log)
    assert bob_prompt[0]["type"] == "text" and bob_prompt[0]["text"].endswith("@alice @bob what is this?")
    assert "[image: dot.png]" not in bob_prompt[0]["text"].splitlines()[-1]
    assert bob_prompt[-1] == {"type": "image", "mimeType": "image/png", "data": base64.b64encode(image).decode()}
    assert len(prompts(alice_log)) == 1  # her cut answer is not redone (docs/architecture.md "The store")


async def wait_until_prompted(log_path) -> None:
    from bridge_harness import wait_until

    await wait_until(lambda: prompts(log_path), what=f"a prompt in {log_path.name}")
