"""Who tells a room that the database is away (bridge/outage_tellers.py): only a member of it."""

from bridge.outage_tellers import BOT, tellers

PUPPETS = {"alice": "@sk_alice:hs", "bob": "@sk_bob:hs", "carol": "@sk_carol:hs"}
BOT_ID = "@sidekicks:hs"


def test_an_open_channel_is_told_by_its_own_agents_in_join_order():
    assert tellers(["bob", "alice"], None, PUPPETS, BOT_ID) == ["bob", "alice"]


def test_an_agent_no_longer_configured_is_left_out():
    assert tellers(["gone", "bob"], None, PUPPETS, BOT_ID) == ["bob"]


def test_a_room_not_open_is_not_told_before_the_homeserver_says_who_is_in_it():
    assert tellers([], None, PUPPETS, BOT_ID) == []


def test_a_room_not_open_is_told_by_the_agents_joined_to_it_then_the_bot():
    joined = {"@owner:hs", "@sk_bob:hs", BOT_ID}
    assert tellers([], joined, PUPPETS, BOT_ID) == ["bob", BOT]


def test_nobody_outside_the_room_tells_it():
    assert tellers([], {"@owner:hs", "@sk_bob:hs"}, PUPPETS, BOT_ID) == ["bob"]
    assert tellers([], {"@owner:hs"}, PUPPETS, BOT_ID) == []
