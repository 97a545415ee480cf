"""The bridge on Synapse with workers (tests/synapse_workers.py; deploy/README.md "Beyond one
machine"): the spine, a channel with two agents, an encrypted DM and a thread, each with its
transactions sent by the appservice worker (`notify_appservices_from_worker`) and none by the
main process or another worker (Synapse's own counter, read from each process's metrics).
"""

from __future__ import annotations

import pytest
from bridge_harness import agent, answers_in
from helpers import ALICE, BOB, answered, in_thread, open_dm, prompts, say, thread_of
from matrix_helpers import caught_up, events_in, sync_until
from synapse_workers import sent_only_by_the_sender
from test_channels import group, wait_answers
from test_e2ee import all_encrypted, e2e_owner, final_answers, open_encrypted_dm, unreadable
from test_e2ee import say as say_encrypted

pytestmark = pytest.mark.scale
ANSWER = "Hello **there**, owner. Here is a longer answer in parts."


async def test_a_dm_answer_streams_as_edits_through_the_workers(homeserver, bridge_factory, tmp_path, owner):
    before = await homeserver.workers.appservice_transactions()
    log, release = tmp_path / "alice.log", tmp_path / "release"
    running = await bridge_factory(
        {"alice": agent("--answer", ANSWER, "--chunks", "5", "--hold", str(release), "--log", str(log), title="Alice")}
    )
    room_id = await open_dm(owner, ALICE)
    prompt_event = await say(owner, room_id, "hello")
    # the first part shows while the agent holds the rest: the answer streams, edit by edit
    await sync_until(
        owner,
        lambda: any("Hello" in a["body"] and a["body"] != ANSWER for a in answers_in(events_in(owner, room_id), ALICE)),
    )
    release.touch()
    await sync_until(owner, lambda: [a["body"] for a in answers_in(events_in(owner, room_id), ALICE)] == [ANSWER])
    await running.idle()
    await caught_up(owner, room_id)
    [answer] = answers_in(events_in(owner, room_id), ALICE)
    assert answer["edits"] >= 2 and "<strong>there</strong>" in answer["html"]
    assert prompts(log) == ["hello"]
    stored = running.store.last_messages(running.store.channel_by_room(room_id).id, 10)
    assert [(m.role, m.text) for m in stored] == [("user", "hello"), ("agent", ANSWER)]
    assert stored[0].event_ids == (prompt_event,)
    await sent_only_by_the_sender(homeserver, before)
    # nginx sent the client requests of the docs' list to the generic worker: the owner's syncs
    # and messages, the puppet's answer and its edits
    served = await homeserver.workers.requests_served("generic_worker1")
    assert served.get("SyncRestServlet", 0) > 0 and served.get("RoomSendEventRestServlet", 0) > 0, served


async def test_a_channel_with_two_agents_answers_in_order_through_the_workers(
    homeserver, bridge_factory, tmp_path, owner
):
    before = await homeserver.workers.appservice_transactions()
    logs = {"alice": tmp_path / "alice.log", "bob": tmp_path / "bob.log"}
    running = await bridge_factory(
        {
            "alice": agent("--answer", "Alice says so", "--log", str(logs["alice"]), title="Alice"),
            "bob": agent("--echo-last-line", "--log", str(logs["bob"]), title="Bob"),
        }
    )
    room_id = await group(owner, ALICE, BOB)
    await say(owner, room_id, "@alice @bob what do you think?")
    [bob_answer] = await wait_answers(owner, room_id, BOB)
    [alice_answer] = await wait_answers(owner, room_id, ALICE)
    ids = [e["event_id"] for e in events_in(owner, room_id)]
    assert ids.index(alice_answer["event_id"]) < ids.index(bob_answer["event_id"])
    assert alice_answer["body"] == "Alice says so"
    assert bob_answer["body"] == "echo: @alice @bob what do you think?"
    assert prompts(logs["alice"]) == ["@alice @bob what do you think?"]
    assert "alice: Alice says so" in prompts(logs["bob"])[0]  # bob read alice's answer first
    await running.idle()
    await sent_only_by_the_sender(homeserver, before)


async def test_an_encrypted_dm_is_answered_encrypted_through_the_workers(homeserver, bridge_factory, tmp_path):
    before = await homeserver.workers.appservice_transactions()
    agents = {"alice": agent("--answer", ANSWER, "--chunks", "5", "--delay", "0.05", title="Alice")}
    running = await bridge_factory(agents, folder=tmp_path / "bridge", encryption="on")
    async with e2e_owner(homeserver) as (owner, seen):
        room_id = await open_encrypted_dm(owner, ALICE)
        await say_encrypted(owner, room_id, "hello")
        answers = await final_answers(owner, room_id, ALICE, 1, done=lambda a: a["body"] == ANSWER)
        assert answers[0]["edits"] >= 2
        all_encrypted(seen, owner, room_id, ALICE)
        assert not unreadable(seen, room_id)
        await running.idle()
        channel = running.store.channel_by_room(room_id)
        assert [m.text for m in running.store.last_messages(channel.id, 10)] == ["hello", ANSWER]
    # the room keys reached the bot's and puppets' devices in the appservice worker's
    # transactions (to-device messages): nothing else could have decrypted "hello"
    await sent_only_by_the_sender(homeserver, before)


async def test_a_thread_is_answered_in_its_thread_through_the_workers(homeserver, bridge_factory, tmp_path, owner):
    before = await homeserver.workers.appservice_transactions()
    log = tmp_path / "alice.log"
    running = await bridge_factory(
        {
            "alice": agent("--echo-last-line", "--log", str(log), title="Alice"),
            "bob": agent("--echo-last-line", title="Bob"),
        }
    )
    room_id = await group(owner, ALICE, BOB)
    root = await say(owner, room_id, "@alice explain goroutines")
    await answered(owner, room_id, ALICE, 1)
    await running.idle()
    asked = await say(owner, room_id, "@alice more detail please", **in_thread(root, root))
    alice = await answered(owner, room_id, ALICE, 2)
    assert thread_of(alice[0]) == "" and thread_of(alice[1]) == root
    assert alice[1]["content"]["m.relates_to"]["m.in_reply_to"] == {"event_id": asked}
    assert alice[1]["final"] == "echo: @alice more detail please"
    await running.idle()
    assert len(prompts(log)) == 2
    await sent_only_by_the_sender(homeserver, before)
