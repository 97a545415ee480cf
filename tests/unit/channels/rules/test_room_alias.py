"""`!new`'s alias and its answer (docs/commands.md "In the bridge bot's DM")."""

from __future__ import annotations

from bridge.channels.rules.room_alias import alias_part, made_text

LINK = "https://matrix.to/#/!abc:localhost?via=localhost"


def test_an_alias_part_is_the_name_in_lower_case_with_dashes():
    assert alias_part("test") == "test"
    assert alias_part("Code Review") == "code-review"
    assert alias_part("#général: ok?") == "g-n-ral-ok"
    assert alias_part("  ") is None and alias_part("!!!") is None


def test_the_answer_links_the_alias_or_names_the_room_without_a_hash():
    made = made_text("test", ["local"], "#test:localhost", LINK)
    assert made.body == f"Made #test:localhost with local: {LINK}"
    assert '<a href="https://matrix.to/#/#test:localhost">#test:localhost</a>' in made.html
    plain = made_text("code review", ["alice", "bob"], None, LINK)
    assert plain.body.startswith("Made “code review” with alice, bob:") and "#" not in plain.body.split(":")[0]
    assert f'<a href="{LINK}">code review</a>' in plain.html
