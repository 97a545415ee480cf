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
