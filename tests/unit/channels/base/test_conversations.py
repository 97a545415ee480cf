"""Conversations: the main timeline or a thread (bridge/channels/base/conversations.py, pure)."""

from __future__ import annotations

from bridge.channels.base.conversations import MAIN, conversation_of, is_thread, relation_for, thread_relation


def in_thread(root: str, latest: str = "$latest", falling_back: bool = True) -> dict:
    return {
        "msgtype": "m.text",
        "body": "in the thread",
        "m.relates_to": {
            "rel_type": "m.thread",
            "event_id": root,
            "is_falling_back": falling_back,
            "m.in_reply_to": {"event_id": latest},
        },
    }


def test_a_message_without_relation_is_in_the_main_timeline():
    assert conversation_of({"msgtype": "m.text", "body": "hi"}) == MAIN == ""
    assert not is_thread(MAIN)


def test_a_thread_message_is_in_the_conversation_of_its_root():
    assert conversation_of(in_thread("$root")) == "$root"
    assert conversation_of(in_thread("$root", falling_back=False)) == "$root"  # a real reply in the thread
    assert is_thread("$root")


def test_a_plain_reply_is_in_the_main_timeline():
    # a client without threads replies to a thread message: the reply is a main-timeline event
    assert conversation_of({"body": "x", "m.relates_to": {"m.in_reply_to": {"event_id": "$inthread"}}}) == MAIN


def test_an_edit_and_a_reaction_say_nothing_of_a_thread():
    edit = {
        "body": "* new",
        "m.new_content": {"body": "new"},
        "m.relates_to": {"rel_type": "m.replace", "event_id": "$original"},
    }
    assert conversation_of(edit) == MAIN
    assert conversation_of({"m.relates_to": {"rel_type": "m.annotation", "event_id": "$e", "key": "🛑"}}) == MAIN


def test_malformed_relations_are_the_main_timeline():
    for relates in (
        None,
        "x",
        [],
        {"rel_type": "m.thread"},
        {"rel_type": "m.thread", "event_id": 5},
        {"rel_type": "m.thread", "event_id": ""},
        {"rel_type": "m.thread", "event_id": "root"},
    ):
        assert conversation_of({"body": "x", "m.relates_to": relates}) == MAIN
    assert conversation_of("not a dict") == MAIN  # type: ignore[arg-type]


def test_what_the_bridge_sends_into_a_thread_has_the_reply_fallback():
    assert thread_relation("$root", "$prompt") == {
        "rel_type": "m.thread",
        "event_id": "$root",
        "is_falling_back": True,
        "m.in_reply_to": {"event_id": "$prompt"},
    }
    # with nothing to follow (a scheduled run's key is no event), the fallback quotes the root
    assert thread_relation("$root")["m.in_reply_to"] == {"event_id": "$root"}
    assert thread_relation("$root", "schedule:1:2")["m.in_reply_to"] == {"event_id": "$root"}
    # what is sent reads back as the same conversation
    assert conversation_of({"body": "answer", "m.relates_to": thread_relation("$root", "$p")}) == "$root"


def test_the_main_timeline_gets_no_relation():
    assert relation_for(MAIN, "$prompt") is None
    assert relation_for("$root", "$prompt") == thread_relation("$root", "$prompt")
