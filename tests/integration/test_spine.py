"""The spine: a Matrix message reaches an ACP agent and its answer streams back."""

from __future__ import annotations

import uuid

import aiohttp
import nio
from bridge_harness import agent, answers_in
from helpers import open_dm, prompts, say, stored_channel
from matrix_helpers import caught_up, events_in, sync_until

ANSWER = "Hello **there**, owner. Here is a longer answer in parts."


async def final_answer(owner, room_id, puppet_id, count=1, timeout=60, done=lambda a: True):
    """Wait until `puppet_id` has `count` answers whose last edit has no status line."""

    def finished():
        answers = answers_in(events_in(owner, room_id), puppet_id)
        return len(answers) >= count and all(
            "getting ready" not in a["body"] and not a["body"].startswith(("💭", "✍️", "🔧")) and done(a)
            for a in answers[:count]
        )

    await sync_until(owner, finished, timeout=timeout)
    return answers_in(events_in(owner, room_id), puppet_id)


async def test_dm_answer_streams_as_edits_and_is_stored(bridge_factory, tmp_path, owner):
    log, release = tmp_path / "alice.log", tmp_path / "release"
    # the first of 5 parts, then the agent waits for `release`: the answer is seen mid-way
    running = await bridge_factory(
        {
            "alice": agent(
                "--answer",
                ANSWER,
                "--chunks",
                "5",
                "--delay",
                "0.1",
                "--hold",
                str(release),
                "--log",
                str(log),
                title="Alice (scripted)",
            )
        }
    )
    puppet_id = "@sk_alice:localhost"
    room_id = await open_dm(owner, puppet_id)
    prompt_event = await say(owner, room_id, "hello")
    await sync_until(
        owner,
        lambda: any(
            "Hello" in a["body"] and ANSWER not in a["body"] for a in answers_in(events_in(owner, room_id), puppet_id)
        ),
    )
    release.touch()
    answers = await final_answer(owner, room_id, puppet_id, done=lambda a: a["body"] == ANSWER)
    answer = answers[0]
    # posted at once as a placeholder, then edited part by part, then the final text
    assert "Alice (scripted) is getting ready" in answer["history"][0]
    partial = [body for body in answer["history"][1:-1] if "Hello" in body]
    assert partial and any(ANSWER not in body for body in partial), answer["history"]
    assert answer["edits"] >= 2 and answer["history"][-1] == ANSWER
    assert answer["body"] == ANSWER
    assert "<strong>there</strong>" in answer["html"]
    await running.idle()  # the turns are over: answers stored, nothing more to come
    assert prompts(log) == ["hello"]
    # the store holds both messages, finished, with their Matrix event ids
    channel = running.store.channel_by_room(room_id)
    assert channel is not None and channel.direct_agent == "alice"
    stored = running.store.last_messages(channel.id, 10)
    assert [(m.role, m.text) for m in stored] == [("user", "hello"), ("agent", ANSWER)]
    assert stored[0].event_ids == (prompt_event,)
    assert stored[1].event_ids == (answer["event_id"],)
    # the puppet's display name is the agent's title
    profile = await owner.get_displayname(puppet_id)
    assert profile.displayname == "Alice (scripted)"


async def test_a_quick_answer_is_one_message_never_edited(bridge_factory, tmp_path, monkeypatch, owner):
    # an answer that ends within the grace a running agent gets is posted once, final. The grace
    # is 0.4 s (and SETTLE after the first part): that an echo answer fits in it is a question
    # of speed, measured by tests/bench (bench_latency: "echo answers sent as one message");
    # here the grace is made long enough for any machine, and the behaviour is what is tested
    import bridge.channels.base.stream
    import bridge.channels.turns.turns

    monkeypatch.setattr(bridge.channels.turns.turns, "PLACEHOLDER_GRACE", 30.0)
    monkeypatch.setattr(bridge.channels.base.stream, "SETTLE", 30.0)
    running = await bridge_factory({"alice": agent(title="Alice (scripted)")})
    puppet_id = "@sk_alice:localhost"
    room_id = await open_dm(owner, puppet_id)
    await say(owner, room_id, "first")  # starts the agent: this one shows "getting ready"
    await final_answer(owner, room_id, puppet_id, done=lambda a: a["body"] == "echo: first")
    prompt_event = await say(owner, room_id, "second")
    await final_answer(owner, room_id, puppet_id, count=2, done=lambda a: a["body"].startswith("echo: "))
    channel = running.store.channel_by_room(room_id)
    # the turn is over once its answer is stored: any edit it made was sent before that
    await sync_until(owner, lambda: len(running.store.last_messages(channel.id, 10)) == 4)
    await running.idle()
    await caught_up(owner, room_id)
    first, second = answers_in(events_in(owner, room_id), puppet_id)
    assert first["edits"] >= 1 and "getting ready" in first["history"][0]
    # the running agent answered at once: its message carries the final text from the start
    assert second["body"] == "echo: second"
    assert second["edits"] == 0 and second["history"] == ["echo: second"]
    stored = running.store.last_messages(channel.id, 10)
    assert [(m.role, m.text) for m in stored][-2:] == [("user", "second"), ("agent", "echo: second")]
    assert stored[-2].event_ids == (prompt_event,)
    assert stored[-1].event_ids == (second["event_id"],)


async def test_stranger_never_reaches_the_agent(homeserver, bridge_factory, tmp_path, owner, stranger):
    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": agent("--log", str(log))})
    puppet_id = "@sk_alice:localhost"
    room_id = await open_dm(owner, puppet_id)
    await owner.room_invite(room_id, homeserver.stranger_id)
    assert isinstance(await stranger.join(room_id), nio.JoinResponse)
    await say(stranger, room_id, "stranger here: tell me secrets")
    await say(owner, room_id, "owner here")
    answers = await final_answer(owner, room_id, puppet_id, done=lambda a: "owner here" in a["body"])
    assert len(answers) == 1 and answers[0]["body"] == "echo: owner here"
    await running.idle()  # the turns are over: answers stored, nothing more to come
    assert prompts(log) == ["owner here"]
    channel = running.store.channel_by_room(room_id)
    assert [m.text for m in running.store.last_messages(channel.id, 10)] == ["owner here", "echo: owner here"]


async def test_hs_token_is_checked_on_every_endpoint(homeserver, bridge_factory):
    await bridge_factory({"alice": agent()})
    base = f"http://127.0.0.1:{homeserver.as_port}"
    calls = [
        ("PUT", "/_matrix/app/v1/transactions/x1", {"events": []}),
        ("GET", "/_matrix/app/v1/users/%40sk_alice%3Alocalhost", None),
        ("POST", "/_matrix/app/v1/ping", {}),
        ("PUT", "/transactions/x2", {"events": []}),
    ]
    async with aiohttp.ClientSession() as http:
        for method, path, body in calls:
            for headers in ({}, {"Authorization": "Bearer wrong-token"}):
                async with http.request(method, base + path, json=body, headers=headers) as response:
                    assert response.status == 403, (method, path, headers)
                    assert (await response.json())["errcode"] == "M_FORBIDDEN"
            async with http.request(method, base + path + "?access_token=wrong", json=body) as response:
                assert response.status == 403


async def test_same_transaction_is_processed_once_also_after_restart(homeserver, bridge_factory, tmp_path, owner):
    from config import registration as registrations

    token = registrations.read(homeserver.registration_path).hs_token
    folder = tmp_path / "bridge"
    running = await bridge_factory({"alice": agent()}, folder=folder)
    room_id = await open_dm(owner, "@sk_alice:localhost")
    channel = await stored_channel(running.store, room_id)
    txn_id = f"replayed-{uuid.uuid4().hex}"

    def transaction(event_id: str, body: str) -> dict:
        return {
            "events": [
                {
                    "type": "m.room.message",
                    "room_id": room_id,
                    "sender": homeserver.owner_id,
                    "event_id": event_id,
                    "origin_server_ts": 1,
                    "content": {"msgtype": "m.text", "body": body},
                }
            ]
        }

    url = f"http://127.0.0.1:{homeserver.as_port}/_matrix/app/v1/transactions/{txn_id}"
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as http:
        for _attempt in range(2):
            async with http.put(url, json=transaction("$first", "once"), headers=headers) as r:
                assert r.status == 200
        await final_answer(owner, room_id, "@sk_alice:localhost", done=lambda a: a["body"] == "echo: once")
        await running.idle()
        texts = [m.text for m in running.store.last_messages(channel.id, 10)]
        assert texts == ["once", "echo: once"]

        await running.stop()
        running = await bridge_factory({"alice": agent()}, folder=folder)
        async with http.put(url, json=transaction("$first", "once"), headers=headers) as r:
            assert r.status == 200
        # a new transaction still works, and the replayed one added nothing
        async with http.put(url + "-new", json=transaction("$new", "new one"), headers=headers) as r:
            assert r.status == 200
        await final_answer(
            owner, room_id, "@sk_alice:localhost", count=2, done=lambda a: a["body"].startswith("echo: ")
        )
        await running.idle()
    texts = [m.text for m in running.store.last_messages(channel.id, 10)]
    assert texts[:3] == ["once", "echo: once", "new one"] and len(texts) == 4
    # the agent was restarted without loadSession: its fresh session is told the past
    # (docs/architecture.md "Slots and sessions")
    assert texts[3] == (
        "echo: [Messages in #alice you have not seen yet]\nuser: once\n"
        "alice: echo: once\n[End of the messages]\nThe user now writes to you "
        "(answer directly, without your name in front):\nnew one"
    )


async def test_encrypted_room_gets_one_plain_notice(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": agent("--log", str(log))})
    puppet_id = "@sk_alice:localhost"
    created = await owner.room_create(
        invite=[puppet_id],
        initial_state=[
            {"type": "m.room.encryption", "state_key": "", "content": {"algorithm": "m.megolm.v1.aes-sha2"}}
        ],
    )
    room_id = created.room_id

    def notices():
        return [
            e
            for e in events_in(owner, room_id)
            if e.get("sender") == puppet_id
            and e.get("type") == "m.room.message"
            and "encrypted" in e["content"].get("body", "")
        ]

    await sync_until(owner, lambda: notices())
    # an encrypted message (what a client sends there) gets no second notice and no answer
    await owner.room_send(
        room_id,
        "m.room.encrypted",
        {
            "algorithm": "m.megolm.v1.aes-sha2",
            "ciphertext": "xx",
            "sender_key": "k",
            "session_id": "s",
            "device_id": "D",
        },
    )
    # a plain message after it (a client could still send one there): once it is handled and
    # its answer is out, a second notice would be there to see
    marker = await say(owner, room_id, "plain marker")
    await running.handled(marker)  # and the encrypted message before it
    await running.idle()
    await caught_up(owner, room_id)
    assert len(notices()) == 1
    assert "agents cannot read encrypted messages" in notices()[0]["content"]["body"]


async def test_announced_commands_are_stored_per_agent(bridge_factory, tmp_path, owner):
    running = await bridge_factory({"alice": agent("--commands", "review:Review code,plan:Make a plan")})
    room_id = await open_dm(owner, "@sk_alice:localhost")
    await say(owner, room_id, "hi")
    await final_answer(owner, room_id, "@sk_alice:localhost", done=lambda a: a["body"] == "echo: hi")
    await running.idle()  # the turns are over: answers stored, nothing more to come
    commands = running.store.agent_commands("alice")
    assert [c["name"] for c in commands] == ["review", "plan"]
    assert commands[0]["description"] == "Review code"
