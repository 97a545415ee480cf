"""An agent's `budget:` in the config (config/loader.py `_budget`): read, or one line per problem."""

from __future__ import annotations

import pytest
import yaml

import config
from config.model import Budget

BASE = {
    "owner": "@me:localhost",
    "homeserver": {"url": "http://127.0.0.1:8008", "domain": "localhost"},
    "appservice": {"listen": "127.0.0.1:29333", "registration": "registration.yaml"},
}


def load(tmp_path, budget):
    spec = {"command": ["x"]} if budget is None else {"command": ["x"], "budget": budget}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({**BASE, "agents": {"alice": spec}}))
    return config.load(str(path))


def test_a_budget_is_read_per_day_or_month(tmp_path):
    assert load(tmp_path, {"cost": 5, "per": "month"}).agents["alice"].budget == Budget(5.0, "month")
    assert load(tmp_path, {"cost": 0.5}).agents["alice"].budget == Budget(0.5, "day")
    assert load(tmp_path, None).agents["alice"].budget is None


@pytest.mark.parametrize(
    "budget,expected",
    [
        ({"cost": "lots"}, "agents.alice.budget: cost must be a number of 0 or more, got 'lots'"),
        ({"cost": -1}, "agents.alice.budget: cost must be a number of 0 or more"),
        ({"cost": 1, "per": "week"}, "agents.alice.budget: per must be day or month, got 'week'"),
        ({"cost": 1, "every": "day"}, "agents.alice.budget: unknown key 'every' (known here: cost, per)"),
        (5, "agents.alice.budget: must be a mapping like {cost: 5.00, per: day}, got 5"),
    ],
)
def test_a_bad_budget_is_one_line(tmp_path, budget, expected):
    with pytest.raises(config.ConfigError) as caught:
        load(tmp_path, budget)
    assert any(expected in line for line in caught.value.problems), caught.value.problems
