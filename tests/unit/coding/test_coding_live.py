"""LiveMessage (bridge/coding/live.py) and the settings helpers, without a homeserver: a fake
Intent records what would be sent."""

from __future__ import annotations

import asyncio

import pytest
from fake_intent import FakeIntent

from acp import SessionState, Update
from bridge.coding import live
from bridge.coding.live import LiveMessage
from bridge.coding.settings import current_values
from bridge.coding.work import Work


def body(n: int) -> dict:
    return {"msgtype": "m.notice", "body": f"state {n}"}


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(live, "EDIT_INTERVAL", 0.01)


async def test_first_state_at_once_then_only_the_latest_never_out_of_order():
    intent = FakeIntent()
    intent.gate.clear()  # the first send is in flight while states 1..9 come
    message = LiveMessage(intent, "!r", "the plan")
    message.show(body(0))
    await asyncio.sleep(0.01)
    for n in range(1, 10):
        message.show(body(n))
    intent.gate.set()
    assert await message.close() == "$m1"
    shown = [int(c["body"].split()[1]) for _, c in intent.sent]
    assert shown[0] == 0 and shown[-1] == 9 and shown == sorted(shown) and len(shown) <= 3
    assert [kind for kind, _ in intent.sent] == ["send"] + ["edit"] * (len(shown) - 1)
    assert intent.overlaps == 0  # one request at a time: edits land in order


async def test_a_failed_edit_is_carried_by_close():
    intent = FakeIntent(fail=lambda kind, n: kind == "edit" and n == 1)
    message = LiveMessage(intent, "!r", "a tool call")
    message.show(body(0))
    await asyncio.sleep(0.05)
    message.show(body(1))
    await asyncio.sleep(0.05)  # its edit failed
    await message.close()
    assert intent.sent[-1] == ("edit", body(1))


async def test_the_same_state_twice_is_not_sent_again():
    intent = FakeIntent()
    message = LiveMessage(intent, "!r", "a tool call")
    message.show(body(0))
    await asyncio.sleep(0.05)
    message.show(body(0))
    await message.close(body(0))
    assert intent.sent == [("send", body(0))]


async def test_closing_with_the_state_of_an_edit_in_flight_sends_it_once():
    # seen with OpenCode: one "failed" update of a tool call (after a rejection, after !stop) came
    # just before the turn closed its messages, and its notice was edited twice, identically
    intent = FakeIntent()
    message = LiveMessage(intent, "!r", "a tool call")
    message.show(body(0))
    await asyncio.sleep(0.05)
    intent.gate.clear()
    message.show(body(1))
    while not intent.in_flight:  # the edit to state 1 is on its way
        await asyncio.sleep(0.005)
    closing = asyncio.create_task(message.close(body(1)))
    await asyncio.sleep(0.02)
    intent.gate.set()
    await closing
    assert intent.sent == [("send", body(0)), ("edit", body(1))]


async def test_work_keeps_one_message_per_tool_call_and_one_plan():
    intent = FakeIntent()
    work = Work(intent, "!r", 1 << 20)
    from acp.updates import normalise_update

    for raw in (
        {"sessionUpdate": "plan", "entries": [{"content": "a", "status": "pending", "priority": "high"}]},
        {"sessionUpdate": "tool_call", "toolCallId": "1", "title": "Read a.py", "kind": "read"},
        {"sessionUpdate": "tool_call", "toolCallId": "2", "title": "Run", "kind": "execute"},
        {"sessionUpdate": "tool_call_update", "toolCallId": "1", "status": "completed"},
        {"sessionUpdate": "plan", "entries": [{"content": "a", "status": "completed", "priority": "high"}]},
    ):
        assert work.update(normalise_update(raw))
    assert not work.update(Update("text", text="hi"))
    await work.close()
    # updates that come together are coalesced: one message each, showing its latest state
    firsts = [c["body"].splitlines()[0] for kind, c in intent.sent if kind == "send"]
    assert sorted(firsts) == sorted(["📋 Plan (1/1 done)", "📖 Read a.py — ✅ done", "▶️ Run — ⏳ pending"])
    assert work.known("1").status == "completed" and len(work.message_ids) == 3


async def test_a_todo_tool_call_is_the_turns_checklist_not_a_tool_message():
    from test_coding_render import todowrite

    from acp.updates import normalise_update

    intent = FakeIntent()
    work = Work(intent, "!r", 1 << 20)
    for raw in todowrite(("Write hello.py", "completed", "high"), ("Run it", "pending", "medium"), title="2 todos"):
        assert work.update(normalise_update(raw))
    await work.close()
    firsts = [c["body"] for kind, c in intent.sent if kind == "send"]
    assert firsts and all(body.startswith("📋 To-do list") for body in firsts), intent.sent
    assert intent.sent[-1][1]["body"] == "📋 To-do list (1/2 done)\n✅ Write hello.py · high priority\n⬜ Run it"
    assert len(work.message_ids) == 1 and not any("2 todos" in c["body"] for _, c in intent.sent)


def test_current_values_name_mode_model_and_the_other_options():
    state = SessionState()
    state.apply_result(
        {
            "configOptions": [
                {
                    "id": "mode",
                    "name": "Mode",
                    "category": "mode",
                    "type": "select",
                    "currentValue": "ask",
                    "options": [{"value": "ask", "name": "Ask"}, {"value": "plan", "name": "Plan"}],
                },
                {
                    "id": "effort",
                    "name": "Effort",
                    "type": "select",
                    "currentValue": "low",
                    "options": [{"value": "low", "name": "Low"}, {"value": "high", "name": "High"}],
                },
            ],
            "models": {"currentModelId": "m1", "availableModels": [{"modelId": "m1", "name": "M1"}]},
        }
    )
    assert current_values(state) == {("mode", "mode"): "ask", ("model", "model"): "m1", ("config", "effort"): "low"}
