"""Who answers (docs/architecture.md "Who answers"): every rule, pure."""

from __future__ import annotations

from bridge.channels.turns.mentions import Parsed, SlashCommand
from bridge.channels.turns.routing import Answerer, Route, route


def p(*mentions: str, slash: SlashCommand | None = None) -> Parsed:
    return Parsed(tuple(mentions), slash)


def test_slash_command_goes_alone_to_its_agent():
    r = route("/alice:review main.py", p(slash=SlashCommand("alice", "review", "main.py")), ["alice", "bob"], "bob")
    assert r == Route((Answerer("alice", "/review main.py", alone=True),))


def test_slash_command_wins_over_mentions():
    r = route(
        "@alice /review x @bob",
        p("alice", "bob", slash=SlashCommand("alice", "review", "x @bob")),
        ["alice", "bob"],
        None,
    )
    assert r.answerers == (Answerer("alice", "/review x @bob", alone=True),)


def test_slash_command_for_a_non_member_invites_it():
    r = route("/carol:review x", p(slash=SlashCommand("carol", "review", "x")), ["alice"], None)
    assert r.invite == ("carol",) and r.answerers == (Answerer("carol", "/review x", alone=True),)


def test_mentioned_agents_answer_in_order_with_the_whole_text():
    text = "@bob and @alice: thoughts?"
    r = route(text, p("bob", "alice"), ["alice", "bob"], "alice")
    assert r.answerers == (Answerer("bob", text), Answerer("alice", text))
    assert r.invite == () and not r.nobody


def test_mentioned_non_member_is_invited_first():
    r = route("@carol hi @alice", p("carol", "alice"), ["alice", "bob"], None)
    assert r.invite == ("carol",)
    assert [t.agent for t in r.answerers] == ["carol", "alice"]


def test_last_speaker_answers_unmentioned_message():
    r = route("and then?", p(), ["alice", "bob"], "bob")
    assert r.answerers == (Answerer("bob", "and then?"),)


def test_last_speaker_no_longer_a_member_does_not_answer():
    assert route("and then?", p(), ["alice", "bob"], "carol").nobody
    assert route("and then?", p(), ["alice"], "carol").answerers == (Answerer("alice", "and then?"),)


def test_single_member_answers():
    assert route("hi", p(), ["alice"], None).answerers == (Answerer("alice", "hi"),)


def test_nobody_with_several_members_and_no_speaker():
    r = route("hi", p(), ["alice", "bob"], None)
    assert r.nobody and r.answerers == () and r.invite == ()


def test_nobody_without_members():
    assert route("hi", p(), [], None).nobody


def test_direct_channel_agent_always_answers_mentions_are_text():
    r = route("@bob what do you think?", p("bob"), ["alice"], None, direct_agent="alice")
    assert r == Route((Answerer("alice", "@bob what do you think?"),))
    assert route("hi", p(), ["alice"], None, direct_agent="alice").answerers == (Answerer("alice", "hi"),)


def test_direct_channel_slash_command_for_its_agent_goes_alone():
    r = route("/alice:review x", p(slash=SlashCommand("alice", "review", "x")), ["alice"], None, direct_agent="alice")
    assert r.answerers == (Answerer("alice", "/review x", alone=True),) and r.invite == ()


def test_direct_channel_slash_command_for_another_agent_is_plain_text():
    r = route("/bob:review x", p(slash=SlashCommand("bob", "review", "x")), ["alice"], None, direct_agent="alice")
    assert r.answerers == (Answerer("alice", "/bob:review x"),) and r.invite == ()
