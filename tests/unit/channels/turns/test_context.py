"""What an agent reads before its turn (docs/architecture.md "What each agent reads"), byte for byte. Pure."""

from __future__ import annotations

from bridge.channels.turns.context import UnseenMessage, build_prompt, cut

READS_EXAMPLE = (
    "[Messages in #general you have not seen yet]\n"
    "user: @alice explain goroutines\n"
    "alice: Goroutines are light threads…\n"
    "[End of the messages]\n"
    "The user now writes to you (answer directly, without your name in front):\n"
    "@bob what do you think?"
)


def test_adr_example_exactly():
    unseen = [
        UnseenMessage("user", "@alice explain goroutines"),
        UnseenMessage("alice", "Goroutines are light threads…"),
    ]
    assert build_prompt("general", unseen, "@bob what do you think?") == READS_EXAMPLE


def test_channel_name_with_hash_is_not_doubled():
    unseen = [
        UnseenMessage("user", "@alice explain goroutines"),
        UnseenMessage("alice", "Goroutines are light threads…"),
    ]
    assert build_prompt("#general", unseen, "@bob what do you think?") == READS_EXAMPLE


def test_nothing_unseen_sends_the_text_alone():
    assert build_prompt("general", [], "@bob what do you think?") == "@bob what do you think?"


def test_at_most_the_last_n_messages():
    unseen = [UnseenMessage("user", f"m{i}") for i in range(30)]
    prompt = build_prompt("c", unseen, "now", max_messages=20)
    lines = prompt.split("\n")
    assert lines[0] == "[Messages in #c you have not seen yet]"
    assert lines[1:21] == [f"user: m{i}" for i in range(10, 30)]
    assert lines[21:] == [
        "[End of the messages]",
        "The user now writes to you (answer directly, without your name in front):",
        "now",
    ]


def test_default_limit_is_twenty():
    unseen = [UnseenMessage("bob", f"m{i}") for i in range(25)]
    body = build_prompt("c", unseen, "now").split("\n")[1:-3]
    assert body == [f"bob: m{i}" for i in range(5, 25)]


def test_each_message_cut_at_the_char_limit():
    long = "x" * 2000
    prompt = build_prompt("c", [UnseenMessage("alice", long), UnseenMessage("user", "short")], "now", max_chars=1500)
    first = prompt.split("\n")[1]
    assert first.startswith("alice: x")
    assert len(first[len("alice: ") :]) == 1500 and first.endswith("…")
    assert prompt.split("\n")[2] == "user: short"


def test_cut_keeps_short_text_and_exact_length():
    assert cut("abc", 3) == "abc"
    assert cut("abcd", 3) == "ab…"
    assert len(cut("y" * 5000, 1500)) == 1500


def test_zero_messages_sends_text_alone():
    assert build_prompt("c", [UnseenMessage("user", "a")], "now", max_messages=0) == "now"


def test_the_users_text_is_never_cut():
    text = "z" * 3000
    assert build_prompt("c", [UnseenMessage("user", "a")], text, max_chars=10).endswith("\n" + text)


def test_a_handed_turn_has_its_frame_line_in_place_of_the_closing_sentence():
    from bridge.channels.turns.context import Handed

    unseen = [UnseenMessage("user", "@alice plan it"), UnseenMessage("alice", "the plan")]
    prompt = build_prompt("general", unseen, "review the plan", handed=Handed("alice"))
    assert prompt == (
        "[Messages in #general you have not seen yet]\n"
        "user: @alice plan it\n"
        "alice: the plan\n"
        "[End of the messages]\n"
        "[alice handed this conversation to you; alice's request follows "
        "(answer directly, without your name in front):]\n"
        "review the plan"
    )


def test_a_handed_turn_is_framed_with_nothing_unseen_and_says_a_schedule_began_it():
    from bridge.channels.turns.context import Handed

    prompt = build_prompt("general", [], "go on", handed=Handed("alice", scheduled=True))
    frame, request = prompt.split("\n")
    assert frame.startswith("[alice handed this conversation to you from a scheduled run, not a message from the owner")
    assert frame.endswith("]") and request == "go on"
