"""Coding agents end to end: plans, tool calls with diffs and terminal output,
permissions about a diff, modes / models / config options kept across a restart, usage and
`!status`, elicitation answered by reply, stop reasons.

Real Synapse, the owner's matrix-nio client, the real bridge in-process, and the scripted coding
agent (tests/agents/coding_agent.py), which logs every JSON-RPC message it receives.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nio
from bridge_harness import answers_in
from helpers import received, say
from matrix_helpers import events_in, sync_until
from test_answers import appservice_with, react, reactions_on, room_with, wait_final
from test_attachments import download

ALICE = "@sk_alice:localhost"
CODING = Path(__file__).resolve().parents[1] / "agents" / "coding_agent.py"
PLAN_STEPS = ["Read the code", "Write the change", "Run the tests", "Tidy up"]


def coding(log: Path, *options: str, title: str = "Alice") -> dict:
    return {"command": [sys.executable, str(CODING), "--log", str(log), *options], "title": title}


def calls(log: Path, method: str) -> list[dict]:
    return [m.get("params") or {} for m in received(log) if m.get("method") == method]


def replies(log: Path) -> list[dict]:
    return [m["result"] for m in received(log) if "result" in m and "method" not in m]


def messages(owner, room_id) -> list[dict]:
    return answers_in(events_in(owner, room_id), ALICE)


def notices(owner, room_id) -> list[dict]:
    return [m for m in messages(owner, room_id) if m["msgtype"] == "m.notice"]


def plans(owner, room_id) -> list[dict]:
    return [m for m in notices(owner, room_id) if m["history"][0].startswith("📋 Plan")]


def tool_messages(owner, room_id, icon: str) -> list[dict]:
    return [m for m in notices(owner, room_id) if m["history"][0].startswith(icon)]


async def coding_room(bridge_factory, owner, log: Path, *options: str, **config):
    """A bridge with the coding agent as alice (`options`: hers, `config`: the bridge's, her log in
    `log`) and a room with her: the running bridge and the room."""
    running = await bridge_factory({"alice": coding(log, *options)}, **config)
    return running, await room_with(owner)


def first(owner, room_id, starts: str) -> dict | None:
    """alice's first message whose first version starts with `starts`, as it is now."""
    return next((m for m in messages(owner, room_id) if m["history"][0].startswith(starts)), None)


async def first_shown(owner, room_id, starts: str) -> dict:
    """`first(…)` once it is there."""
    await sync_until(owner, lambda: first(owner, room_id, starts))
    return first(owner, room_id, starts)


async def next_notice(owner, room_id, text: str, contains: str | None = None) -> str:
    """Send `text`; the puppet's next notice (containing `contains`, if given)."""
    before = len(notices(owner, room_id))

    def found():
        fresh = [n["body"] for n in notices(owner, room_id)[before:]]
        return [b for b in fresh if contains is None or contains in b]

    await say(owner, room_id, text)
    await sync_until(owner, found)
    return found()[0]


async def final_answer(owner, room_id, prefix: str) -> dict:
    """The answer message once its text starts with `prefix` (the agent's own words)."""

    def found():
        return next(
            (m for m in messages(owner, room_id) if m["msgtype"] == "m.text" and m["body"].startswith(prefix)), None
        )

    await sync_until(owner, found)
    return found()


async def reply_to(owner, room_id: str, event_id: str, text: str) -> None:
    response = await owner.room_send(
        room_id,
        "m.room.message",
        {"msgtype": "m.text", "body": text, "m.relates_to": {"m.in_reply_to": {"event_id": event_id}}},
    )
    assert isinstance(response, nio.RoomSendResponse), response


def plan_body(n: int) -> str:
    """The plan the coding agent sends the n-th time (0-based), as the bridge renders it."""
    from acp.toolcalls import parse_plan
    from bridge.coding.render import plan

    entries = [
        {
            "content": c,
            "priority": ("high", "medium", "low", "low")[i],
            "status": "completed" if i < n else ("in_progress" if i == n else "pending"),
        }
        for i, c in enumerate(PLAN_STEPS[: max(2, min(len(PLAN_STEPS), n + 2))])
    ]
    return plan(parse_plan(entries)).body


# ---- plans and tool calls -------------------------------------------------------------------


async def test_the_plan_is_one_message_edited_as_the_agent_replaces_it(bridge_factory, tmp_path, owner):
    log, hold = tmp_path / "alice.log", tmp_path / "hold"
    hold.mkdir()
    _, room_id = await coding_room(bridge_factory, owner, log, "--hold", str(hold))
    await say(owner, room_id, "fix it [[plan:4]]")
    sent = [plan_body(n) for n in range(4)]
    for n in range(4):  # each plan is shown before the agent sends the next
        await sync_until(owner, lambda n=n: plans(owner, room_id) and plans(owner, room_id)[-1]["body"] == sent[n])
        (hold / f"plan-{n + 1}").touch()
    found = await final_answer(owner, room_id, "done: fix it")
    shown = plans(owner, room_id)
    assert len(shown) == 1  # one message per turn, never one per update
    assert shown[0]["history"] == sent and shown[0]["edits"] == 3  # edited each time it changed
    assert shown[0]["body"].startswith("📋 Plan (3/4 done)") and "🔄 Tidy up" in shown[0]["body"]
    assert found["body"] == "done: fix it"  # the plan is not part of the answer's text
    # quick replacements are coalesced: the latest state shows, never one out of order
    for n in range(1, 3):
        (hold / f"plan-{n}").unlink()
    await say(owner, room_id, "again [[plan:3]]")
    for n in range(1, 3):
        (hold / f"plan-{n}").touch()
    await sync_until(
        owner, lambda: len(plans(owner, room_id)) == 2 and plans(owner, room_id)[1]["body"] == plan_body(2)
    )
    second = plans(owner, room_id)[1]["history"]
    positions = [sent.index(body) for body in second]
    assert positions == sorted(positions) and positions[-1] == 2
    assert plans(owner, room_id)[0]["body"] == sent[-1]  # the first keeps its last state


async def test_tool_calls_are_updated_in_place_with_diff_and_terminal_output(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    _, room_id = await coding_room(bridge_factory, owner, log)
    await say(owner, room_id, "change and test [[edit]] [[run:fail]]")
    await wait_final(owner, room_id)

    def settled():
        edits, runs = tool_messages(owner, room_id, "✏️"), tool_messages(owner, room_id, "▶️")
        return (
            len(edits) == 1
            and "✅ done" in edits[0]["body"]
            and len(runs) == 1
            and "❌ failed" in runs[0]["body"]
            and "exit code 2" in runs[0]["body"]
        )

    await sync_until(owner, settled)
    edit = tool_messages(owner, room_id, "✏️")[0]
    assert edit["body"].startswith("✏️ Edit notes.py — ✅ done")
    assert "Where: /work/project/notes.py:1" in edit["body"]
    assert "📄 /work/project/notes.py (+2 −2)" in edit["body"]
    assert "-def greet(name):" in edit["body"] and "+def greet(name: str) -> None:" in edit["body"]
    run = tool_messages(owner, room_id, "▶️")[0]
    assert run["body"].startswith("▶️ Run pytest -q — ❌ failed")
    assert "test_1 ... ok" in run["body"] and "test_3 ... FAILED" in run["body"]
    assert len(notices(owner, room_id)) == 2  # one message per call, whatever the updates


async def test_a_long_diff_is_posted_as_a_file(homeserver, bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    _, room_id = await coding_room(bridge_factory, owner, log)
    await say(owner, room_id, "rewrite [[edit:big]]")
    await wait_final(owner, room_id)

    def files():
        return [
            e for e in events_in(owner, room_id) if e.get("sender") == ALICE and e["content"].get("msgtype") == "m.file"
        ]

    await sync_until(owner, files)
    event = files()[0]
    assert event["content"]["body"] == "notes.py.diff"
    text = (await download(homeserver, owner, event["content"]["url"])).decode()
    assert text.startswith("--- a/work/project/notes.py\n+++ b/work/project/notes.py")
    assert text.count("\n+line ") == 150 and text.count("\n-line ") == 150
    edit = tool_messages(owner, room_id, "✏️")[0]
    assert "attached as a file" in edit["body"] and "+150" in edit["body"]


async def test_a_permission_prompt_shows_the_diff_and_options_by_kind(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    _, room_id = await coding_room(bridge_factory, owner, log)
    await say(owner, room_id, "may I [[permit-edit]]")

    def prompt():
        found = [m for m in messages(owner, room_id) if "asks permission" in m["history"][0]]
        return found and len(reactions_on(owner, room_id, found[0]["event_id"])) == 4 and found[0]

    await sync_until(owner, prompt)
    shown = prompt()
    assert shown["body"].startswith("🔐 Alice asks permission: ✏️ Edit notes.py")
    assert "```diff" in shown["body"] and "+def greet(name: str) -> None:" in shown["body"]
    assert "<pre><code" in shown["html"]
    assert [line for line in shown["body"].splitlines() if line[:2] in ("1.", "2.", "3.", "4.")] == [
        "1. ✅ Allow once — Yes",
        "2. ✅ Allow always — Yes, always",
        "3. ❌ Reject once — No",
        "4. 🚫 Reject always — No, never",
    ]
    await react(owner, room_id, shown["event_id"], "2\ufe0f\u20e3")
    found = await wait_final(owner, room_id)
    assert found[0]["body"].startswith("permission: always.")
    outcomes = [r["outcome"] for r in replies(log) if isinstance(r, dict) and "outcome" in r]
    assert outcomes == [{"outcome": "selected", "optionId": "always"}]


# ---- modes, models, options -------------------------------------------------------------------


async def test_a_mode_chosen_by_command_survives_a_restart(bridge_factory, tmp_path, owner):
    log, state = tmp_path / "alice.log", tmp_path / "sessions"
    agents = {"alice": coding(log, "--offer", "modes", "--load-session", "--state", str(state))}
    first = await bridge_factory(agents, folder=tmp_path / "b")
    room_id = await room_with(owner)
    listing = await next_notice(owner, room_id, "!mode")
    assert "Alice — mode:" in listing and "▶ ask (Ask)" in listing and "· plan (Plan)" in listing
    line = await next_notice(owner, room_id, "!mode alice plan", contains="🔀")
    assert line == "🔀 Alice: mode Ask → Plan"
    assert [c["modeId"] for c in calls(log, "session/set_mode")] == ["plan"]
    session_id = calls(log, "session/set_mode")[0]["sessionId"]
    assert "▶ plan (Plan)" in await next_notice(owner, room_id, "!mode alice")

    await first.stop()  # a new agent process starts every loaded session in mode "ask"
    await bridge_factory(agents, folder=tmp_path / "b")
    await say(owner, room_id, "hello again")
    # the prompt is logged after the mode is set again: wait for both
    await sync_until(owner, lambda: len(calls(log, "session/set_mode")) == 2 and calls(log, "session/prompt"))
    again = calls(log, "session/set_mode")[1]
    assert again == {"sessionId": session_id, "modeId": "plan"}
    loads = calls(log, "session/load")
    assert [load["sessionId"] for load in loads] == [session_id]
    # the mode is set again after the load and before the prompt
    order = [m.get("method") for m in received(log) if m.get("method")]
    assert (
        order.index("session/load")
        < len(order) - 1 - order[::-1].index("session/set_mode")
        < len(order) - 1 - order[::-1].index("session/prompt")
    )
    await wait_final(owner, room_id)


async def test_a_mode_chosen_by_command_is_set_again_on_a_fresh_session(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    agents = {"alice": coding(log, "--offer", "modes")}  # no session/load: every start is a new session
    first = await bridge_factory(agents, folder=tmp_path / "b")
    room_id = await room_with(owner)
    await next_notice(owner, room_id, "!mode alice code", contains="🔀")
    await first.stop()
    await bridge_factory(agents, folder=tmp_path / "b")
    await say(owner, room_id, "hello again")
    await final_answer(owner, room_id, "done: hello again")
    news = calls(log, "session/new")
    sets = calls(log, "session/set_mode")
    assert len(news) == 2 and [s["modeId"] for s in sets] == ["code", "code"]
    prompted = calls(log, "session/prompt")[-1]["sessionId"]
    assert sets[1]["sessionId"] == prompted != sets[0]["sessionId"]  # the new session got it


async def test_model_and_options_through_config_options_or_the_models_fallback(bridge_factory, tmp_path, owner):
    config_log, models_log = tmp_path / "alice.log", tmp_path / "bob.log"
    await bridge_factory(
        {"alice": coding(config_log), "bob": coding(models_log, "--offer", "modes,models", title="Bob")}
    )
    room_id = await room_with(owner)
    assert (await next_notice(owner, room_id, "!model alice large", contains="🔀")) == "🔀 Alice: model Small → Large"
    assert calls(config_log, "session/set_config_option")[-1]["configId"] == "model"
    assert calls(config_log, "session/set_config_option")[-1]["value"] == "large"
    listing = await next_notice(owner, room_id, "!config")
    assert "thought_level (Thinking): low" in listing
    assert (
        await next_notice(owner, room_id, "!config thought_level high", contains="🔀")
    ) == "🔀 Alice: Thinking Low → High"
    # the mode goes through the config option too: config options are preferred over modes
    await next_notice(owner, room_id, "!mode code", contains="🔀")
    assert calls(config_log, "session/set_config_option")[-1] == {
        "sessionId": calls(config_log, "session/set_config_option")[-1]["sessionId"],
        "configId": "mode",
        "value": "code",
    }
    assert calls(config_log, "session/set_mode") == []
    wrong = await next_notice(owner, room_id, "!mode alice sideways", contains="⚠️")
    assert "sideways" in wrong and "ask" in wrong and "plan" in wrong

    await say(owner, room_id, "@bob hi")  # bob joins the channel
    await sync_until(
        owner,
        lambda: (
            len(
                [
                    m
                    for m in answers_in(events_in(owner, room_id), "@sk_bob:localhost")
                    if not m["body"].startswith(("⏳", "💭", "✍️"))
                ]
            )
            >= 1
        ),
    )
    before = len([e for e in events_in(owner, room_id) if e.get("sender") == "@sk_bob:localhost"])

    def bob_line():
        said = [
            e["content"].get("body", "") for e in events_in(owner, room_id) if e.get("sender") == "@sk_bob:localhost"
        ][before:]
        return [s for s in said if s.startswith("🔀")]

    await say(owner, room_id, "!model bob large")
    await sync_until(owner, bob_line)
    assert bob_line()[0] == "🔀 Bob: model Small → Large"
    assert [c["modelId"] for c in calls(models_log, "session/set_model")] == ["large"]


async def test_a_mode_the_agent_switches_itself_is_told_and_stored(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    running, room_id = await coding_room(bridge_factory, owner, log)
    await say(owner, room_id, "go ahead [[mode:code]]")
    await wait_final(owner, room_id)
    await sync_until(owner, lambda: any(n["body"].startswith("🔀") for n in notices(owner, room_id)))
    lines = [n["body"] for n in notices(owner, room_id) if n["body"].startswith("🔀")]
    assert lines == ["🔀 Alice switched mode to Ask → Code"]  # one line, not one per update
    channel = running.store.channel_by_room(room_id)
    assert running.store.settings.get(channel.id, "alice").mode == "code"


async def test_status_shows_mode_model_usage_cost_and_title(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    running, room_id = await coding_room(bridge_factory, owner, log)
    await say(owner, room_id, "count [[usage]] [[title:Fix the greeting]]")
    await wait_final(owner, room_id)
    await running.idle()
    status = await next_notice(owner, room_id, "!status", contains="Status of")
    assert (
        "Alice: ready · mode Ask · model Small · context 52k/200k (26%) · cost $0.42 · “Fix the greeting”" in status
    ), status
    channel = running.store.channel_by_room(room_id)
    settings = running.store.settings.get(channel.id, "alice")
    assert (settings.used, settings.size, settings.cost, settings.currency, settings.title) == (
        52000,
        200000,
        0.42,
        "USD",
        "Fix the greeting",
    )


# ---- questions --------------------------------------------------------------------------------


async def test_an_elicitation_is_answered_by_reply(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    _, room_id = await coding_room(bridge_factory, owner, log)
    await say(owner, room_id, "set up [[ask]]")

    asked = await first_shown(owner, room_id, "❓")
    assert asked["body"].startswith("❓ Alice asks: A few details, please")
    assert "1. Project name" in asked["body"] and "2. How many" in asked["body"]
    assert "a) Red  b) Green" in asked["body"]
    # an answer that does not fit: one line, the question stays open
    before = len(notices(owner, room_id))
    await reply_to(owner, room_id, asked["event_id"], "1. demo\n2. 99\n3. b")
    await sync_until(owner, lambda: any("does not fit" in n["body"] for n in notices(owner, room_id)[before:]))
    await reply_to(owner, room_id, asked["event_id"], "1. demo\n2. 3\n3. b")
    found = await final_answer(owner, room_id, "elicited:")
    assert found["body"].startswith(
        'elicited: {"action": "accept", "content": {"colour": "g", "confirm": true, "count": 3, "name": "demo"}}'
    )
    await sync_until(owner, lambda: first(owner, room_id, "❓")["body"].endswith("✅ Answered"))


async def test_a_url_elicitation_names_the_host_first_and_asks_consent(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    _, room_id = await coding_room(bridge_factory, owner, log)
    await say(owner, room_id, "log in [[ask-url]]")

    asked = await first_shown(owner, room_id, "🔗")
    assert "login.example.com" in asked["body"] and "authorize" not in asked["body"]
    await reply_to(owner, room_id, asked["event_id"], "yes")
    found = await final_answer(owner, room_id, "url consent:")
    assert found["body"].startswith("url consent: accept.")
    link = [m["body"] for m in messages(owner, room_id) if m["body"].startswith("Open: ")]
    assert link == ["Open: https://login.example.com/authorize?state=xyz"]
    # the agent sent elicitation/complete after the accept: the question says it is done
    await sync_until(owner, lambda: first(owner, room_id, "🔗")["body"].endswith("✅ Done on login.example.com"))
    shown = first(owner, room_id, "🔗")["history"]
    assert any(h.endswith("🔗 Link sent: waiting for you to finish on login.example.com") for h in shown)


async def test_a_url_elicitation_finished_elsewhere_is_closed_as_done(bridge_factory, tmp_path, owner):
    log, finished = tmp_path / "alice.log", tmp_path / "finished"
    await bridge_factory({"alice": coding(log)})
    room_id = await room_with(owner)
    await say(owner, room_id, f"log in [[ask-url-done:{finished}]]")

    def consent():
        return next((m for m in messages(owner, room_id) if m["history"][0].startswith("🔗")), None)

    await sync_until(owner, consent)
    finished.touch()  # the owner finished it in another client: the agent sends elicitation/complete
    found = await final_answer(owner, room_id, "url elsewhere:")
    assert found["body"].startswith("url elsewhere: accept.")
    await sync_until(
        owner, lambda: consent()["body"].endswith("✅ Done elsewhere: the agent says login.example.com is complete")
    )
    assert not [m for m in messages(owner, room_id) if m["body"].startswith("Open: ")]  # no link was needed


async def test_stop_declines_an_open_question(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    _, room_id = await coding_room(bridge_factory, owner, log)
    await say(owner, room_id, "set up [[ask]]")
    await first_shown(owner, room_id, "❓")
    await say(owner, room_id, "!stop")
    await sync_until(owner, lambda: [r for r in replies(log) if isinstance(r, dict) and "action" in r])
    assert [r for r in replies(log) if isinstance(r, dict) and "action" in r] == [{"action": "decline"}]
    methods = [m.get("method") for m in received(log) if m.get("method")]
    assert "session/cancel" in methods  # cancelled first, then the question answered
    await sync_until(
        owner,
        lambda: any(m["history"][0].startswith("❓") and "Declined" in m["body"] for m in messages(owner, room_id)),
    )


async def test_a_question_not_answered_in_time_is_declined(homeserver, bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    _, room_id = await coding_room(
        bridge_factory, owner, log, appservice=appservice_with(homeserver, permission_timeout=1)
    )
    await say(owner, room_id, "set up [[ask]]")
    found = await final_answer(owner, room_id, "elicited:")
    assert found["body"].startswith('elicited: {"action": "decline"}')
    asked = next(m for m in messages(owner, room_id) if m["history"][0].startswith("❓"))
    await sync_until(
        owner,
        lambda: next(m for m in messages(owner, room_id) if m["event_id"] == asked["event_id"])["body"].endswith(
            "⏱ No answer: declined"
        ),
    )


async def test_a_question_the_agent_withdraws_is_closed(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    _, room_id = await coding_room(bridge_factory, owner, log)
    await say(owner, room_id, "ask and forget [[ask-withdraw]]")
    found = await final_answer(owner, room_id, "withdrawn:")
    assert found["body"].startswith("withdrawn: error -32800.")  # the request was cancelled
    await sync_until(
        owner,
        lambda: any(
            m["history"][0].startswith("❓ Alice asks: Never mind this")
            and m["body"].endswith("⏹ Withdrawn by the agent")
            for m in messages(owner, room_id)
        ),
    )


# ---- stop reasons -------------------------------------------------------------------------------


async def test_stop_reasons_end_the_answer_with_one_line(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    _, room_id = await coding_room(bridge_factory, owner, log)
    await say(owner, room_id, "long one [[stop:max_tokens]]")
    found = await wait_final(owner, room_id)
    assert found[0]["body"] == "done: long one\n\n✂️ The answer was cut: the agent reached its token limit."
    await say(owner, room_id, "nope [[stop:refusal]]")
    found = await wait_final(owner, room_id, count=2)
    assert found[1]["body"].endswith("🚫 The agent refused to go on; this prompt will not be part of its next turn.")
