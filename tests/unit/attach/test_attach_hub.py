"""Who is attached where, and the first answer to a permission winning (bridge/attach/hub.py)."""

import asyncio
from types import SimpleNamespace

from bridge.attach.hub import Client, Hub

OPTIONS = [{"optionId": "yes", "name": "Allow", "kind": "allow_once"}, {"optionId": "no", "kind": "reject_once"}]


class FakePeer:
    def __init__(self, answer=None):
        self.sent: list[tuple[str, dict]] = []
        self.answer = answer  # what a request gets (None: never answered)
        self.cancelled = 0

    async def notify(self, method, params):
        self.sent.append((method, params))

    async def request(self, method, params):
        self.sent.append((method, params))
        if self.answer is None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return self.answer

    async def close(self):
        pass


def client(hub: Hub, where=("c1", ""), answer=None, name="Zed") -> Client:
    found = Client(FakePeer(answer), "alice", name, {where})
    hub.clients.add(found)
    return found


async def delivered(found: Client) -> list[dict]:
    while not found.outbox.empty():
        await found.peer.notify("session/update", found.outbox.get_nowait())
    return [params for method, params in found.peer.sent if method == "session/update"]


async def test_updates_reach_the_clients_attached_there_and_the_owners_words_once():
    hub = Hub()
    here, elsewhere = client(hub), client(hub, ("c1", "$thread"))
    hub.began("c1", "", "$prompt", "hi")
    hub.began("c1", "", "$prompt", "hi")  # a second agent answering the same message
    hub.update("c1", "", {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "yo"}})
    hub.update("c1", "", {"kind": "the bridge's own"})
    got = await delivered(here)
    assert [p["update"]["sessionUpdate"] for p in got] == ["user_message_chunk", "agent_message_chunk"]
    assert {p["sessionId"] for p in got} == {"sk-c1"}
    assert await delivered(elsewhere) == []


async def test_the_client_that_prompted_is_not_told_its_own_words_and_its_wait_ends_with_the_turns():
    hub = Hub()
    author, other = client(hub), client(hub, name="acpx")
    from bridge.attach.hub import PromptWait

    wait = hub.prompts["$p"] = PromptWait(author, {"t1", "t2"})
    hub.began("c1", "", "$p", "hi")
    assert await delivered(author) == [] and len(await delivered(other)) == 1
    hub.ended("$p", "t1", "end_turn")
    assert not wait.done.is_set()
    hub.ended("$p", "t2", "cancelled")
    assert wait.done.is_set() and wait.stop_reason == "cancelled" and "$p" not in hub.prompts


async def test_a_client_answering_first_wins_and_the_room_is_told_where():
    hub = Hub()
    client(hub, answer={"outcome": {"outcome": "selected", "optionId": "yes"}})
    room_cancelled = asyncio.Event()

    async def in_room(request):
        request.on_posted()  # posted in the room: the clients are asked now
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            room_cancelled.set()
            raise

    request = SimpleNamespace(tool_call={"toolCallId": "t"}, options=OPTIONS)
    assert await hub.asker("c1", "", in_room)(request) == "yes"
    assert room_cancelled.is_set() and request.answered_elsewhere == "✅ Allowed once in Zed"


async def test_the_room_answering_first_withdraws_the_clients_requests():
    hub = Hub()
    waiting, refusing = client(hub), client(hub, answer={"outcome": {"outcome": "cancelled"}})

    async def in_room(request):
        request.on_posted()
        while not waiting.peer.sent:  # asked, and waiting for its person
            await asyncio.sleep(0)
        return "no"

    request = SimpleNamespace(tool_call={}, options=OPTIONS)
    assert await hub.asker("c1", "", in_room)(request) == "no"
    assert waiting.peer.cancelled == 1 and not hasattr(request, "answered_elsewhere")
    assert refusing.peer.sent[0][0] == "session/request_permission"


async def test_the_clients_are_asked_only_once_the_room_has_posted_it():
    hub = Hub()
    attached = client(hub, answer={"outcome": {"outcome": "selected", "optionId": "yes"}})

    async def in_room(request):
        return None  # it could not be posted: the owner cannot be asked, nor the clients

    assert await hub.asker("c1", "", in_room)(SimpleNamespace(tool_call={}, options=OPTIONS)) is None
    assert attached.peer.sent == []


async def test_with_nobody_attached_the_room_alone_is_asked():
    hub = Hub()

    async def in_room(request):
        return "yes"

    assert await hub.asker("c1", "", in_room)(SimpleNamespace(tool_call={}, options=OPTIONS)) == "yes"


async def test_a_turn_told_twice_keeps_its_first_stop_reason():
    hub = Hub()
    from bridge.attach.hub import PromptWait

    wait = hub.prompts["$p"] = PromptWait(client(hub), {"t1", "t2"})
    hub.ended("$p", "t1", "max_tokens")
    hub.ended("$p", "t1", "cancelled")  # the portal's word for a turn that ended already
    hub.ended("$p", "t2", "end_turn")
    assert wait.done.is_set() and wait.stop_reason == "end_turn"
    hub.ended("$p", "t2", "cancelled")
    assert wait.stop_reason == "end_turn"


def question(mode: str = "form") -> object:
    from acp.elicitation import ElicitationRequest

    return ElicitationRequest(mode, "Name?", raw={"sessionId": "agent-session", "mode": mode, "message": "Name?"})


async def test_a_question_answered_first_in_a_client_that_takes_forms_wins():
    hub = Hub()
    asking = client(hub, answer={"action": "accept", "content": {"name": "kumquat"}})
    asking.elicitation = True
    silent = client(hub, answer={"action": "accept", "content": {"name": "never asked"}})  # no forms announced

    async def in_room(request):
        request.on_posted()
        await asyncio.Event().wait()

    request = question()
    answer = await hub.questioner("c1", "", in_room)(request)
    assert (answer.action, answer.content) == ("accept", {"name": "kumquat"})
    assert request.answered_elsewhere == "✅ Answered in Zed"
    assert asking.peer.sent[0] == (
        "elicitation/create",
        {"sessionId": "sk-c1", "mode": "form", "message": "Name?"},
    )
    assert silent.peer.sent == []


async def test_a_url_question_is_asked_in_the_room_only():
    hub = Hub()
    asking = client(hub, answer={"action": "accept"})
    asking.elicitation = True

    async def in_room(request):
        return "the room's"

    assert await hub.questioner("c1", "", in_room)(question("url")) == "the room's"
    assert asking.peer.sent == []


async def test_a_client_is_flushed_once_what_was_queued_is_sent():
    hub = Hub()
    found = client(hub)
    hub.update("c1", "", {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "a"}})
    delivering = asyncio.ensure_future(found.deliver())
    await found.flushed()
    assert [m for m, _ in found.peer.sent] == ["session/update"]
    delivering.cancel()
