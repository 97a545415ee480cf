"""bridge/matrix/msc4391.py, the pure parts: state keys, descriptions, invocations, power levels."""

from __future__ import annotations

import base64
import hashlib

from bridge.matrix.msc4391 import DESCRIPTION, description, descriptions, digest, invocation, raised_levels, state_key

ALICE = "@sk_alice:localhost"


def test_the_state_key_is_padded_base64_of_sha256_of_command_and_user_id():
    expected = base64.b64encode(hashlib.sha256(b"review@sk_alice:localhost").digest()).decode()
    assert state_key("review", ALICE) == expected
    assert expected.endswith("=") and len(expected) == 44  # padded standard base64 of 32 bytes
    assert state_key("review", "@sk_bob:localhost") != expected


def test_a_command_with_input_has_one_optional_string_parameter_taking_the_rest_of_the_line():
    content = description({"name": "review", "description": "Review a file", "input": {"hint": "path"}})
    assert content == {
        "command": "review",
        "description": {"m.text": [{"body": "Review a file"}]},
        "parameters": [
            {
                "key": "args",
                "type": "string",
                "required": False,
                "schema": {"schema_type": "primitive", "type": "string"},
                "optional": True,
                "description": {"m.text": [{"body": "path"}]},
            }
        ],
        "fi.mau.tail_parameter": "args",
    }


def test_a_command_without_input_has_no_parameters_and_bad_names_are_left_out():
    assert description({"name": "/clear", "description": ""}) == {"command": "clear", "parameters": []}
    assert description({"name": "two words"}) is None
    assert description({"name": ""}) is None
    found = descriptions([{"name": "clear"}, {"name": "bad name"}, {"name": "model", "input": {"hint": ""}}], ALICE)
    assert set(found) == {state_key("clear", ALICE), state_key("model", ALICE)}
    assert digest(found) == digest(dict(reversed(list(found.items()))))  # order does not matter


def agent_of(user_id: str) -> str | None:
    return {"@sk_alice:localhost": "alice", "@sk_bob:localhost": "bob"}.get(user_id)


def commands_of(agent: str) -> list[dict] | None:
    return {"alice": [{"name": "review"}], "bob": [{"name": "deploy"}]}.get(agent)


def invoke(content: dict, members=("alice", "bob"), direct=None):
    return invocation(content, list(members), agent_of, commands_of, direct)


def test_an_invocation_runs_the_command_for_the_mentioned_agent():
    content = {
        "msgtype": "m.text",
        "body": "/review main.py",
        "m.mentions": {"user_ids": [ALICE]},
        "org.matrix.msc4391.command": {"command": "review", "arguments": {"args": "main.py"}},
    }
    assert invoke(content) == ("alice", "review", "main.py")


def test_without_a_mention_the_direct_agent_or_the_member_with_the_command_runs_it():
    content = {"org.matrix.msc4391.command": {"command": "deploy", "arguments": {}}}
    assert invoke(content) == ("bob", "deploy", "")
    assert invoke(content, members=("alice",), direct="alice") == ("alice", "deploy", "")
    assert invoke({"org.matrix.msc4391.command": {"command": "unknown"}}, members=("alice", "bob")) is None


def test_other_clients_arguments_are_passed_in_order_as_text():
    content = {
        "org.matrix.msc4391.command": {
            "command": "review",
            "arguments": {"path": "a.py", "strict": True, "n": 3, "room": {"type": "room_id", "id": "!r:localhost"}},
        }
    }
    assert invoke(content)[2] == "a.py true 3 !r:localhost"


def test_a_message_without_a_command_block_is_no_invocation():
    assert invoke({"msgtype": "m.text", "body": "/review x"}) is None
    assert invoke({"org.matrix.msc4391.command": "review"}) is None


def test_power_is_raised_only_by_someone_who_may_and_only_when_needed():
    levels = {
        "users": {"@sidekicks:localhost": 100, "@owner:localhost": 100},
        "users_default": 0,
        "state_default": 50,
        "events": {"m.room.power_levels": 100},
    }
    raised = raised_levels(levels, ALICE, "@sidekicks:localhost")
    assert raised["users"][ALICE] == 50 and raised["users"]["@owner:localhost"] == 100
    assert raised_levels(raised, ALICE, "@sidekicks:localhost") is None  # has it already
    assert raised_levels(levels, ALICE, "@sk_bob:localhost") is None  # may not
    cheap = {**levels, "events": {**levels["events"], DESCRIPTION: 0}}
    assert raised_levels(cheap, ALICE, "@sidekicks:localhost") is None  # not needed


def test_a_creator_of_a_version_12_room_may_raise_without_being_listed():
    levels = {"users": {"@owner:localhost": 100}, "state_default": 50}
    assert raised_levels(levels, ALICE, "@sidekicks:localhost") is None
    raised = raised_levels(levels, ALICE, "@sidekicks:localhost", frozenset({"@sidekicks:localhost"}))
    assert raised["users"] == {"@owner:localhost": 100, ALICE: 50}


def test_an_agent_announcing_a_thousand_commands_publishes_fifty_short_ones():
    from bridge.matrix.msc4391 import MAX_DESCRIPTIONS, MAX_TEXT

    commands = [{"name": f"cmd{i}", "description": "x" * 5000, "input": {"hint": "h" * 5000}} for i in range(1000)]
    found = descriptions(commands, ALICE)
    assert MAX_DESCRIPTIONS == 50 and len(found) == 50
    assert [c["command"] for c in found.values()] == [f"cmd{i}" for i in range(50)]  # its first ones
    for content in found.values():
        assert len(content["description"]["m.text"][0]["body"]) == MAX_TEXT
        assert len(content["parameters"][0]["description"]["m.text"][0]["body"]) == MAX_TEXT
    # unusable ones do not count against the cap; an absurdly long name is not published
    mixed = [{"name": "bad name"}, {"name": "y" * 65}] * 100 + [{"name": "ok"}]
    assert [c["command"] for c in descriptions(mixed, ALICE).values()] == ["ok"]
    assert descriptions("not a list", ALICE) == {}
