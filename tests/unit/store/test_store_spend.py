"""store/spend.py: what agents cost per period — only what is new in a session's cumulative cost
is added, to each period given; a raise adds to one period's budget."""

DAY, MONTH = "day:2026-12-06", "month:2026-12"


def test_a_cumulative_cost_adds_only_what_is_new(store):
    spent = store.spending.add("alice", "s1", 0.25, "USD", [DAY, MONTH])
    assert spent[DAY].amount == 0.25 and spent[MONTH].amount == 0.25 and spent[DAY].currency == "USD"
    store.spending.add("alice", "s1", 0.75, "USD", [DAY, MONTH])  # +0.50
    store.spending.add("alice", "s2", 0.10, "USD", [DAY, MONTH])  # another session: +0.10
    store.spending.add("alice", "s1", 0.75, "USD", [DAY, MONTH])  # the same again: nothing new
    assert round(store.spending.get("alice", DAY).amount, 6) == 0.85
    assert store.spending.get("bob", DAY).amount == 0.0 and not store.spending.get("bob", DAY).reported


def test_a_cost_that_went_down_counts_again_from_zero(store):
    store.spending.add("alice", "s1", 1.0, "USD", [DAY])
    store.spending.add("alice", "s1", 0.2, "USD", [DAY])
    assert round(store.spending.get("alice", DAY).amount, 6) == 1.2


def test_a_raise_adds_to_one_period(store):
    store.spending.add("alice", "s1", 1.0, "USD", [DAY])
    assert store.spending.raise_budget("alice", DAY, 2.5).raised == 2.5
    assert store.spending.raise_budget("alice", DAY, 1.0).raised == 3.5
    assert store.spending.get("alice", "day:2026-12-07").raised == 0.0
    assert store.spending.get("alice", DAY).reported


def test_a_channel_counts_what_is_new_in_its_sessions(store):
    from store.spend import channel_key

    spent = store.spending.add("alice", "s1", 0.5, "USD", [DAY], channel="c1")
    assert spent[DAY].amount == 0.5 and spent[f"{channel_key('c1')} {DAY}"].amount == 0.5
    store.spending.add("bob", "s2", 0.25, "USD", [DAY], channel="c1")  # another agent, same channel
    store.spending.add("alice", "s1", 0.75, "USD", [DAY], channel="c1")  # +0.25
    store.spending.add("alice", "s3", 1.0, "USD", [DAY], channel="c2")  # another channel
    store.spending.add("alice", "s4", 2.0, "USD", [DAY])  # no channel known: the agent's only
    assert round(store.spending.get(channel_key("c1"), DAY).amount, 6) == 1.0
    assert round(store.spending.get(channel_key("c2"), DAY).amount, 6) == 1.0
    assert round(store.spending.get("alice", DAY).amount, 6) == 3.75
    assert store.spending.raise_budget(channel_key("c1"), DAY, 1.0).raised == 1.0
    assert store.spending.get("alice", DAY).raised == 0.0
