"""Reply fallbacks are stripped before routing and storing (bridge/matrix/replies.py, pure)."""

from __future__ import annotations

from bridge.channels.turns.mentions import parse
from bridge.matrix.replies import replied_to, strip_body_fallback, strip_html_fallback, without_fallback

ALIASES = {"alice": "alice", "bob": "bob", "sk_alice": "alice", "sk_bob": "bob"}


def agent_of(user_id: str) -> str | None:
    return {"@sk_alice:localhost": "alice", "@sk_bob:localhost": "bob"}.get(user_id)


QUOTED = "> <@sk_alice:localhost> I think we should use a queue.\n> And a second line\n\n"
HTML = (
    '<mx-reply><blockquote><a href="https://matrix.to/#/!r:localhost/$a">In reply to</a> '
    '<a href="https://matrix.to/#/@sk_alice:localhost">@sk_alice:localhost</a><br>I think we should '
    "use a queue.</blockquote></mx-reply>"
)


def reply(body: str, html: str | None = None, **relates) -> dict:
    content = {
        "msgtype": "m.text",
        "body": QUOTED + body,
        "m.relates_to": {"m.in_reply_to": {"event_id": "$a"}, **relates},
    }
    if html is not None:
        content.update({"format": "org.matrix.custom.html", "formatted_body": HTML + html})
    return content


def test_a_replys_quote_is_stripped_from_body_and_html():
    content = without_fallback(reply("@bob what do you think?", "@bob what do you <b>think</b>?"))
    assert content["body"] == "@bob what do you think?"
    assert content["formatted_body"] == "@bob what do you <b>think</b>?"
    assert replied_to(content) == "$a"


def test_the_quoted_agent_is_not_a_mention_once_stripped():
    content = reply(
        "@bob what do you think?", '<a href="https://matrix.to/#/@sk_bob:localhost">bob</a> what do you think?'
    )
    raw = parse(content["body"], content["formatted_body"], [], agent_of, ALIASES)
    assert raw.mentions[0] == "alice"  # the bug: the quote routes to the quoted agent first
    clean = without_fallback(content)
    assert parse(clean["body"], clean["formatted_body"], [], agent_of, ALIASES).mentions == ("bob",)
    plain = without_fallback(reply("what now?"))
    assert plain["body"] == "what now?"
    assert parse(plain["body"], None, [], agent_of, ALIASES).mentions == ()


def test_a_number_replied_to_a_question_is_just_the_number():
    content = without_fallback(
        {
            "msgtype": "m.text",
            "body": "> <@sk_alice:localhost> 🔐 Alice asks permission: Read\n> \n> 1. Allow\n\n2",
            "m.relates_to": {"m.in_reply_to": {"event_id": "$q"}},
        }
    )
    assert content["body"] == "2" and replied_to(content) == "$q"


def test_only_a_fallback_is_stripped():
    own_quote = "> a quote of my own\n\nand my words"
    assert strip_body_fallback(own_quote) == own_quote  # not a fallback: no quoted sender
    assert strip_body_fallback("no quote") == "no quote"
    assert strip_body_fallback("> <@u:hs> only a quote") == ""
    assert strip_body_fallback("> * <@u:hs> waves\n\nhi") == "hi"  # an emote quoted
    # no reply: the body is left alone, even if it looks like one
    looks = {"msgtype": "m.text", "body": QUOTED + "x"}
    assert without_fallback(looks) is looks
    # a thread message whose in_reply_to is only a fallback has no quote in its body
    thread = {
        "msgtype": "m.text",
        "body": "> <@u:hs> my own quote of u\n\nok",
        "m.relates_to": {
            "rel_type": "m.thread",
            "event_id": "$root",
            "is_falling_back": True,
            "m.in_reply_to": {"event_id": "$last"},
        },
    }
    assert without_fallback(thread)["body"] == thread["body"]
    assert replied_to(thread) is None  # its in_reply_to is the thread's latest event, no reply
    real = {**thread, "m.relates_to": {**thread["m.relates_to"], "is_falling_back": False}}
    assert replied_to(real) == "$last"  # a real reply inside the thread
    assert strip_html_fallback("<MX-REPLY>x</mx-reply>rest") == "rest"
    assert strip_html_fallback("<p>no reply</p>") == "<p>no reply</p>"


def test_malformed_relations_are_not_replies():
    for relates in (None, "x", {"m.in_reply_to": "x"}, {"m.in_reply_to": {"event_id": 5}}, {"m.in_reply_to": {}}):
        content = {"msgtype": "m.text", "body": "> <@u:hs> q\n\nhi", "m.relates_to": relates}
        assert replied_to(content) is None
        assert without_fallback(content)["body"] == "> <@u:hs> q\n\nhi"


def test_a_number_answers_the_question_it_replies_to_else_the_latest():
    import asyncio

    from bridge.channels.asks.asks import Ask, answered_by

    loop = asyncio.new_event_loop()
    try:

        def question(room, event_id, done=False):
            future = loop.create_future()
            if done:
                future.set_result(0)
            return Ask(room, event_id, [{"optionId": "a"}, {"optionId": "b"}], future)

        older, newer, elsewhere = question("!r", "$q1"), question("!r", "$q2"), question("!other", "$q3")
        decided = question("!r", "$q0", done=True)
        pending = [decided, older, newer, elsewhere]
        assert answered_by(pending, "!r", "$q1") is older  # the one it replies to
        assert answered_by(pending, "!r", None) is newer  # no reply: the latest open
        assert answered_by(pending, "!r", "$answer") is None  # a reply to something else
        assert answered_by(pending, "!r", "$q3") is None  # another room's question
        assert answered_by(pending, "!r", "$q0") is None  # decided already
        assert answered_by([decided], "!r", None) is None  # none open: an ordinary message
    finally:
        loop.close()
