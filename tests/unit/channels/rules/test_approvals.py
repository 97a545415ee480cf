"""bridge/channels/rules/approvals.py: who answers an ask and whom it mentions, `!approve` words. Pure."""

from __future__ import annotations

import pytest

from bridge.channels.rules.approvals import (
    ANY_OWNER,
    REQUESTER,
    USAGE,
    approve_mode,
    approve_switch,
    approvers,
    mentioning,
)

OWNERS = ["@me:hs", "@ben:hs"]


def test_the_default_is_the_requester():
    assert approve_mode(None) == REQUESTER
    assert approve_mode("garbage") == REQUESTER
    assert approve_mode(ANY_OWNER) == ANY_OWNER


def test_the_requester_answers_and_is_the_only_one_mentioned():
    assert approvers(REQUESTER, "@ben:hs", OWNERS) == ("@ben:hs", ["@ben:hs"])


def test_any_owner_answers_and_every_owner_is_mentioned():
    assert approvers(ANY_OWNER, "@ben:hs", OWNERS) == (None, OWNERS)


def test_a_scheduled_run_is_answered_by_any_owner():
    assert approvers(REQUESTER, None, OWNERS + ["@me:hs"]) == (None, OWNERS)


def test_switch_words():
    assert approve_switch([]) is None
    assert approve_switch(["Requester"]) == REQUESTER
    assert approve_switch(["any-owner"]) == ANY_OWNER
    assert approve_switch(["any"]) == ANY_OWNER
    for bad in (["everyone"], ["requester", "now"]):
        with pytest.raises(ValueError, match="Usage"):
            approve_switch(bad)
    assert USAGE.startswith("Usage: !approve")


def test_mentioning_adds_the_pills_and_m_mentions():
    content = {
        "msgtype": "m.text",
        "body": "Alice asks",
        "format": "org.matrix.custom.html",
        "formatted_body": "<p>Alice asks</p>",
    }
    out = mentioning(content, ["@me:hs"])
    assert out["m.mentions"] == {"user_ids": ["@me:hs"]}
    assert out["body"] == "Alice asks"  # the plain text still starts with what is asked
    assert out["formatted_body"] == '<p><a href="https://matrix.to/#/@me:hs">@me:hs</a>:</p><p>Alice asks</p>'
    assert "m.mentions" not in content  # not changed in place


def test_mentioning_no_one_changes_nothing():
    content = {"msgtype": "m.text", "body": "x"}
    assert mentioning(content, []) is content
