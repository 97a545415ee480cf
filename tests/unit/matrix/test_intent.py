"""bridge/matrix/intent.py against a recording homeserver (aiohttp test server): transaction ids, declared
mentions, the outgoing hook, and that no event leaves the bridge any other way."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from bridge.channels.base.stream import SPLIT_WEIGHT, message_content
from bridge.matrix.client import AppserviceClient, MatrixError
from bridge.matrix.intent import MAX_EVENT_BYTES, EventTooLarge, Intent, Outgoing, declare_mentions, edit_content
from bridge.matrix.markdown import markdown_to_html

ALICE = "@sk_alice:localhost"
ROOM = "!room:localhost"
BRIDGE = Path(__file__).resolve().parents[3] / "bridge"


class Recorder:
    """A homeserver that records each request (method, path, query, JSON body) and answers 200."""

    def __init__(self):
        self.requests: list[dict] = []
        self.status = 200
        self.drop_first = 0  # close the connection without answering, this many times

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.requests.append(
            {
                "method": request.method,
                "path": request.path,
                "query": dict(request.query),
                "raw": raw,
                "body": json.loads(raw) if raw and request.content_type == "application/json" else None,
            }
        )
        if self.drop_first:
            self.drop_first -= 1
            request.transport.close()  # the request reached us; its answer is lost
            return web.Response()
        if self.status != 200:
            return web.json_response({"errcode": "M_FORBIDDEN", "error": "no"}, status=self.status)
        n = len(self.requests)
        return web.json_response({"event_id": f"$e{n}", "content_uri": f"mxc://localhost/m{n}"})

    def sends(self) -> list[dict]:
        return [r for r in self.requests if "/send/" in r["path"]]


@pytest.fixture
async def homeserver():
    recorder = Recorder()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", recorder.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    session = aiohttp.ClientSession()
    recorder.url = str(server.make_url("")).rstrip("/")
    recorder.session = session
    yield recorder
    await session.close()
    await server.close()


def intent_for(hs: Recorder, outgoing: Outgoing | None = None) -> Intent:
    return Intent(AppserviceClient(hs.url, ALICE, "as-token", hs.session), outgoing)


async def test_every_send_carries_a_transaction_id_the_callers_when_given(homeserver):
    intent = intent_for(homeserver)
    first = await intent.send(ROOM, {"msgtype": "m.text", "body": "one"})
    await intent.send(ROOM, {"msgtype": "m.text", "body": "two"})
    await intent.send(ROOM, {"msgtype": "m.text", "body": "three"}, txn_id="my-txn")
    await intent.react(ROOM, first, "👍")
    paths = [r["path"] for r in homeserver.sends()]
    txns = [p.rsplit("/", 1)[1] for p in paths]
    assert re.fullmatch(r"[0-9a-f]{32}", txns[0]) and re.fullmatch(r"[0-9a-f]{32}", txns[1])
    assert txns[0] != txns[1] and txns[2] == "my-txn" and re.fullmatch(r"[0-9a-f]{32}", txns[3])
    assert paths[3].startswith(f"/_matrix/client/v3/rooms/{ROOM}/send/m.reaction/")
    assert all(r["query"]["user_id"] == ALICE for r in homeserver.requests)
    assert first == "$e1"


async def test_a_send_whose_answer_was_lost_is_retried_with_the_same_transaction_id(homeserver):
    homeserver.drop_first = 1
    event_id = await intent_for(homeserver).send(ROOM, {"msgtype": "m.text", "body": "once"})
    sent = homeserver.sends()
    assert len(sent) == 2 and sent[0]["path"] == sent[1]["path"]  # the homeserver keeps one event
    assert event_id == "$e2"


async def test_messages_and_edits_declare_their_mentions(homeserver):
    intent = intent_for(homeserver)
    # agent text that names the room and the owner must not notify them
    await intent.send(ROOM, {"msgtype": "m.text", "body": "@room, @owner:localhost: done"})
    await intent.send(ROOM, {"msgtype": "m.notice", "body": "hi", "m.mentions": {"user_ids": ["@owner:localhost"]}})
    await intent.edit(ROOM, "$orig", {"msgtype": "m.text", "body": "@room again"})
    await intent.react(ROOM, "$orig", "1️⃣")
    plain, intended, edit, reaction = [r["body"] for r in homeserver.sends()]
    assert plain["m.mentions"] == {}
    assert intended["m.mentions"] == {"user_ids": ["@owner:localhost"]}
    assert edit["m.mentions"] == {} and edit["m.new_content"]["m.mentions"] == {}
    assert edit["m.relates_to"] == {"rel_type": "m.replace", "event_id": "$orig"}
    assert edit["m.new_content"]["body"] == "@room again" and edit["body"] == "* @room again"
    assert "m.mentions" not in reaction  # only messages carry mentions
    assert reaction["m.relates_to"] == {"rel_type": "m.annotation", "event_id": "$orig", "key": "1️⃣"}


def test_declared_mentions_replace_a_malformed_one_and_keep_the_callers():
    assert declare_mentions({"body": "x", "m.mentions": "everyone"})["m.mentions"] == {}
    content = {"body": "x", "m.new_content": {"body": "x", "m.mentions": {"room": True}}}
    out = declare_mentions(content)
    assert out["m.new_content"]["m.mentions"] == {"room": True} and out["m.mentions"] == {}
    assert "m.mentions" not in content  # not changed in place


class Inflating(Outgoing):
    """Stands in for Megolm's size: the content sealed as base64 of its JSON (about 4/3 of it,
    as an m.room.encrypted event is), the relation in the clear."""

    def __init__(self):
        self.prepared = 0

    async def prepare(self, user_id, room_id, event_type, content):
        self.prepared += 1
        plain = json.dumps({"type": event_type, "content": content, "room_id": room_id}).encode()
        sealed = {
            "algorithm": "m.megolm.v1.aes-sha2",
            "ciphertext": base64.b64encode(plain).decode(),
            "sender_key": "k" * 43,
            "device_id": "DEVICE",
            "session_id": "s" * 43,
        }
        if "m.relates_to" in content:
            sealed["m.relates_to"] = content["m.relates_to"]
        return "m.room.encrypted", sealed


def as_sent(request: dict) -> int:
    return len(request["raw"])


async def test_every_event_is_measured_as_sent_after_encryption(homeserver):
    intent = intent_for(homeserver, Inflating())
    markdown = ("Some **bold** text and `code` here.\n\n" * 400)[:SPLIT_WEIGHT]
    html = markdown_to_html(markdown)
    # plain, this edit fits (text twice + HTML); sealed, it would not: the fallback is cut first
    new = {
        "msgtype": "m.text",
        "body": markdown,
        "format": "org.matrix.custom.html",
        "formatted_body": html,
        "m.mentions": {"user_ids": ["@owner:localhost"]},
    }
    assert len(json.dumps(edit_content("$orig", new))) < MAX_EVENT_BYTES
    await intent.edit(ROOM, "$orig", new)
    sent = homeserver.sends()[-1]
    assert as_sent(sent) <= MAX_EVENT_BYTES
    inner = json.loads(base64.b64decode(sent["body"]["ciphertext"]))["content"]
    assert inner["m.new_content"]["body"] == markdown and inner["m.new_content"]["formatted_body"] == html
    assert inner["m.new_content"]["m.mentions"] == {"user_ids": ["@owner:localhost"]}  # kept
    assert len(inner["body"]) < 1100 and inner["body"].endswith("…")  # only the fallback was cut


async def test_html_that_grows_five_times_is_dropped_and_the_text_kept(homeserver):
    for outgoing in (None, Inflating()):
        intent = intent_for(homeserver, outgoing)
        text = ("**" + "&<&>&" * 12 + "**\n\n") * 190  # bold: each & < > weighs 4-5 in its HTML
        content = message_content(text, None)
        assert len(json.dumps(content)) > MAX_EVENT_BYTES  # as it was sent before
        await intent.send(ROOM, content)  # a first message posted final
        await intent.edit(ROOM, "$orig", content)  # and an edit
        for sent in homeserver.sends()[-2:]:
            assert as_sent(sent) <= MAX_EVENT_BYTES
            body = (
                sent["body"]
                if outgoing is None
                else json.loads(base64.b64decode(sent["body"]["ciphertext"]))["content"]
            )
            shown = body.get("m.new_content", body)
            assert shown["body"] == text and "formatted_body" not in shown


async def test_an_event_that_cannot_fit_is_refused_before_it_is_sent(homeserver):
    inflating = Inflating()
    intent = intent_for(homeserver, inflating)
    before = len(homeserver.requests)
    with pytest.raises(EventTooLarge, match="over the 60,000-byte limit") as refused:
        await intent.send(ROOM, {"msgtype": "m.text", "body": "x" * 50_000})  # 67 KB sealed
    assert refused.value.size > MAX_EVENT_BYTES and isinstance(refused.value, MatrixError)
    with pytest.raises(EventTooLarge):
        await intent.send(ROOM, {"blob": "x" * 70_000}, event_type="org.example.big")
    assert len(homeserver.requests) == before  # nothing reached the homeserver
    assert inflating.prepared == 1  # a form too big before encryption is not even encrypted


class Sealing(Outgoing):
    """Stands in for encryption: seals the content of rooms it knows, relation in the clear."""

    def __init__(self):
        self.seen: list[tuple] = []

    async def prepare(self, user_id, room_id, event_type, content):
        self.seen.append((user_id, room_id, event_type))
        if room_id != ROOM:
            return event_type, content
        sealed = {"algorithm": "test", "ciphertext": json.dumps({"type": event_type, "content": content})}
        if "m.relates_to" in content:
            sealed["m.relates_to"] = content["m.relates_to"]
        return "m.room.encrypted", sealed


async def test_the_outgoing_hook_sees_every_room_event_last_and_may_change_it(homeserver):
    hook = Sealing()
    intent = intent_for(homeserver, hook)
    await intent.send(ROOM, {"msgtype": "m.text", "body": "secret"})
    await intent.edit(ROOM, "$e1", {"msgtype": "m.text", "body": "secret 2"})
    await intent.react(ROOM, "$e1", "🛑")
    await intent.send("!plain:localhost", {"msgtype": "m.text", "body": "open"})
    await intent.send_state(ROOM, "m.room.topic", "", {"topic": "t"})
    await intent.redact(ROOM, "$e1", "gone")
    assert hook.seen == [
        (ALICE, ROOM, "m.room.message"),
        (ALICE, ROOM, "m.room.message"),
        (ALICE, ROOM, "m.reaction"),
        (ALICE, "!plain:localhost", "m.room.message"),
    ]
    message, edit, reaction, plain = homeserver.sends()
    assert "/send/m.room.encrypted/" in message["path"] and "secret" not in message["body"].get("body", "")
    inner = json.loads(message["body"]["ciphertext"])
    assert inner["content"]["m.mentions"] == {}  # mentions are declared before the hook runs
    assert edit["body"]["m.relates_to"] == {"rel_type": "m.replace", "event_id": "$e1"}
    assert json.loads(edit["body"]["ciphertext"])["content"]["m.new_content"]["m.mentions"] == {}
    assert "/send/m.room.encrypted/" in reaction["path"] and reaction["body"]["m.relates_to"]["key"] == "🛑"
    assert "/send/m.room.message/" in plain["path"] and plain["body"]["body"] == "open"
    state, redaction = homeserver.requests[-2:]
    assert state["method"] == "PUT" and state["path"] == f"/_matrix/client/v3/rooms/{ROOM}/state/m.room.topic/"
    assert state["body"] == {"topic": "t"}
    assert state["path"].startswith(f"/_matrix/client/v3/rooms/{ROOM}/state/")
    assert redaction["path"].startswith(f"/_matrix/client/v3/rooms/{ROOM}/redact/$e1/")
    assert redaction["body"] == {"reason": "gone"}


async def test_upload_state_and_redact_answer_what_the_homeserver_made(homeserver):
    intent = intent_for(homeserver)
    uri = await intent.upload(b"\x89PNG data", "image/png", "a b.png")
    upload = homeserver.requests[-1]
    assert uri.startswith("mxc://localhost/") and upload["method"] == "POST"
    assert upload["path"] == "/_matrix/media/v3/upload" and upload["query"]["filename"] == "a b.png"
    assert upload["raw"] == b"\x89PNG data" and upload["query"]["user_id"] == ALICE
    assert (await intent.send_state(ROOM, "m.space.child", "!child:localhost", {"via": ["localhost"]})).startswith("$e")
    assert (await intent.redact(ROOM, "$x")).startswith("$e")


async def test_a_refused_send_raises_a_matrix_error_with_the_servers_words(homeserver):
    homeserver.status = 403
    with pytest.raises(MatrixError, match="M_FORBIDDEN no"):
        await intent_for(homeserver).send(ROOM, {"msgtype": "m.text", "body": "x"})
    with pytest.raises(MatrixError):
        await intent_for(homeserver).send_state(ROOM, "m.room.name", "", {"name": "n"})


async def test_a_device_goes_along_with_every_request_once_the_identity_has_one(homeserver):
    intent = intent_for(homeserver)
    intent.client.masquerade_device = "DEVICE1"
    await intent.send(ROOM, {"msgtype": "m.text", "body": "x"})
    await intent.typing(ROOM, True)
    assert all(r["query"].get("device_id") == "DEVICE1" and r["query"]["user_id"] == ALICE for r in homeserver.requests)


# ---- the seam holds: nothing else in the bridge sends events ------------------------------------

SENDS = [
    re.compile(p)
    for p in (
        r"room_send\(",
        r"room_put_state\(",
        r"room_redact\(",
        r"\.put_event\(",
        r"\.put_state\(",
        r"\.redact_event\(",
        r"\.upload_bytes\(",
        r"['\"/]send/",
        r"/redact/",
        r"\.raw\(",
        r"\.client\.",
    )
]


def test_no_event_leaves_the_bridge_but_through_an_intent():
    offenders = []
    for path in sorted(BRIDGE.rglob("*.py")):
        if path.name in ("intent.py", "client.py") and path.parent == BRIDGE / "matrix":
            continue
        text = path.read_text(encoding="utf-8")
        for pattern in SENDS:
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                offenders.append(f"{path.relative_to(BRIDGE.parent)}:{line}: {match.group(0)}")
        # the escape hatch is for reads
        for match in re.finditer(r"intent\.request\(\s*\"(\w+)\"", text):
            if match.group(1) != "GET":
                offenders.append(f"{path.relative_to(BRIDGE.parent)}: intent.request({match.group(1)})")
    assert offenders == []


async def test_a_join_the_homeserver_cannot_do_now_is_tried_again_then_raised(homeserver, monkeypatch):
    from bridge.matrix import intent as intent_module

    monkeypatch.setattr(intent_module, "JOIN_RETRIES", (0.0, 0.0))
    intent = intent_for(homeserver)
    homeserver.status = 502
    with pytest.raises(MatrixError) as caught:  # the event that asked for it comes again
        await intent.join(ROOM)
    assert caught.value.transient
    joins = [r for r in homeserver.requests if r["path"].endswith(f"/join/{ROOM}")]
    assert len(joins) == 3  # the first try and two more
    homeserver.status = 403  # a refusal is final: no retry, no error
    assert await intent.join(ROOM) is False
    assert len([r for r in homeserver.requests if r["path"].endswith(f"/join/{ROOM}")]) == 4
    homeserver.status = 200
    assert await intent.join(ROOM) is True


async def test_a_join_whose_answer_is_lost_is_tried_again(homeserver, monkeypatch):
    from bridge.matrix import intent as intent_module

    monkeypatch.setattr(intent_module, "JOIN_RETRIES", (0.0,))
    homeserver.drop_first = 1  # the connection closes without an answer, once
    assert await intent_for(homeserver).join(ROOM) is True


# ---- a turn in a thread: its new messages carry the thread's relation ---------------------------


async def test_in_a_thread_new_messages_carry_the_relation_edits_and_reactions_keep_their_own(homeserver):
    from bridge.channels.base.conversations import thread_relation
    from bridge.channels.base.stream import Answer
    from bridge.matrix.intent import InRelation

    intent = InRelation(intent_for(homeserver), ROOM, thread_relation("$root", "$prompt"))
    answer = Answer(intent, ROOM, "Alice")
    await answer.start()
    answer.append("the answer")
    await answer.finish(complete=True)
    await intent.react(ROOM, "$prompt", "👍")
    await intent.send("!other:localhost", {"msgtype": "m.text", "body": "elsewhere"})
    await intent.send(ROOM, {"msgtype": "m.notice", "body": "a notice"})
    await intent.typing(ROOM, True)  # every other call is the Intent's
    sent = [
        (r["path"].split("/send/")[1].split("/")[0], r["path"].split("/rooms/")[1].split("/")[0], r["body"])
        for r in homeserver.requests
        if "/send/" in r["path"]
    ]
    thread = {
        "rel_type": "m.thread",
        "event_id": "$root",
        "is_falling_back": True,
        "m.in_reply_to": {"event_id": "$prompt"},
    }
    (kind, room, first), (_, _, edit), (rkind, _, reaction), (_, other_room, other), (_, _, notice) = sent
    assert kind == "m.room.message" and first["m.relates_to"] == thread  # the answer, in the thread
    # an edit relates to its original alone (it stays in the original's thread); its new content has none
    assert edit["m.relates_to"]["rel_type"] == "m.replace" and set(edit["m.relates_to"]) == {"rel_type", "event_id"}
    assert "m.relates_to" not in edit["m.new_content"] and edit["m.new_content"]["body"] == "the answer"
    assert rkind == "m.reaction" and reaction["m.relates_to"]["rel_type"] == "m.annotation"
    assert other_room == "!other:localhost" and "m.relates_to" not in other
    assert notice["m.relates_to"] == thread
    assert any("/typing/" in r["path"] for r in homeserver.requests)


def test_a_puppet_in_the_main_timeline_is_itself():
    from types import SimpleNamespace

    from bridge.matrix.intent import InRelation
    from bridge.matrix.puppet import relating

    puppet = SimpleNamespace(intent="the intent", user_id=ALICE)
    assert relating(puppet, ROOM, None) is puppet
    view = relating(puppet, ROOM, {"rel_type": "m.thread", "event_id": "$root"})
    assert view is not puppet and view.user_id == ALICE and isinstance(view.intent, InRelation)
    assert puppet.intent == "the intent"


# ---- a client's prompt still being quoted: the turn's events wait for the quote ----------------


async def test_after_sent_holds_new_events_in_its_room_until_the_first_send_is_done(homeserver):
    import asyncio

    from bridge.matrix.intent import AfterSent

    first: asyncio.Future = asyncio.get_running_loop().create_future()
    intent = AfterSent(intent_for(homeserver), ROOM, first)
    held = asyncio.ensure_future(intent.send(ROOM, {"msgtype": "m.text", "body": "the answer"}))
    await intent.send("!other:localhost", {"msgtype": "m.text", "body": "elsewhere"})  # another room: at once
    await intent.typing(ROOM, True)  # not an event: at once

    def bodies() -> list[str]:
        return [r["body"]["body"] for r in homeserver.requests if "/send/" in r["path"]]

    assert not held.done() and bodies() == ["elsewhere"]
    first.set_exception(RuntimeError("the quote was refused"))  # done, even failed: the turn goes on
    await held
    await intent.send(ROOM, {"msgtype": "m.text", "body": "then"})
    assert bodies() == ["elsewhere", "the answer", "then"]
    assert any("/typing/" in r["path"] for r in homeserver.requests)
