"""What an attached ACP client and the bridge say of conversations (bridge/attach/wire.py)."""

import pytest

from bridge.attach import wire


def test_a_conversation_and_its_session_id_go_both_ways():
    for conversation in ("", "$root-event_id"):
        session = wire.session_id("0190abc", conversation)
        assert wire.conversation_of(session) == ("0190abc", conversation)
    assert wire.session_id("0190abc", "") == "sk-0190abc"


@pytest.mark.parametrize("session", [None, 3, "", "sk-", "other-0190", "sk-0190-notanevent"])
def test_a_session_id_the_bridge_never_gave_is_none(session):
    assert wire.conversation_of(session) is None


def entries(count: int, cwd: str = "/w") -> list[wire.Listed]:
    return [wire.Listed(f"sk-{n}", cwd, f"t{n}", 1_700_000_000_000 - n) for n in range(count)]


def test_a_list_pages_with_a_cursor_and_filters_by_cwd():
    first = wire.page(entries(wire.PAGE + 3))
    assert len(first["sessions"]) == wire.PAGE and first["nextCursor"] == str(wire.PAGE)
    rest = wire.page(entries(wire.PAGE + 3), cursor=first["nextCursor"])
    assert [s["sessionId"] for s in rest["sessions"]] == [f"sk-{n}" for n in range(wire.PAGE, wire.PAGE + 3)]
    assert "nextCursor" not in rest
    assert wire.page(entries(2), cwd="/w/")["sessions"] and not wire.page(entries(2), cwd="/elsewhere")["sessions"]
    assert wire.page(entries(1))["sessions"][0] == {
        "sessionId": "sk-0",
        "cwd": "/w",
        "title": "t0",
        "updatedAt": "2023-11-14T22:13:20.000Z",
    }


def test_history_replays_the_owners_and_the_agents_words():
    assert wire.history("sk-1", [("user", "hi"), ("agent", "hello")]) == [
        {
            "sessionId": "sk-1",
            "update": {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "hi"}},
        },
        {
            "sessionId": "sk-1",
            "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hello"}},
        },
    ]


def test_a_title_says_where_and_how_it_began():
    assert wire.title_of("#general", "  fix   the\nbuild ") == "#general: fix the build"
    assert wire.title_of("#general", "") == "#general"
    assert wire.title_of("x", "a" * 200).endswith("…") and len(wire.title_of("x", "a" * 200)) == 3 + wire.TITLE_CHARS


def test_a_prompt_reads_as_text_and_is_quoted_with_the_clients_name():
    blocks = [
        {"type": "text", "text": "look at"},
        {"type": "resource", "resource": {"uri": "file:///a.py", "text": "x = 1"}},
        {"type": "resource_link", "uri": "file:///b.py", "name": "b.py"},
        {"type": "image", "data": "..."},
    ]
    assert wire.prompt_text(blocks) == "look at\nfile:///a.py:\n```\nx = 1\n```\n[b.py](file:///b.py)\n[image]"
    name = wire.client_name({"clientInfo": {"name": "zed", "title": "Zed"}})
    assert wire.quoted(name, "hi") == "💻 from Zed: hi"
    assert wire.client_name({}) == "an ACP client"


def test_the_hello_line_names_the_agent():
    assert wire.read_hello(wire.hello_line("alice")) == "alice"
    assert wire.read_hello(wire.hello_line(None)) is None
    for line in (b"{}", b"garbage", b'{"sidekicks": "mcp"}'):
        with pytest.raises(ValueError):
            wire.read_hello(line)
