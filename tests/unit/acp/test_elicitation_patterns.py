"""An agent's regular expression (an elicitation field's `pattern`) runs on a linear-time engine
(acp/elicitation.py pattern_matches, google-re2): pure, no I/O."""

from __future__ import annotations

import time

import pytest

from acp.elicitation import Field, parse_answer, pattern_matches

CATASTROPHIC = ["^(a+)+$", "^(a|a)*$", "^(a|aa)+$", "(x+x+)+y", "^(\\w+\\s?)*$"]


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_a_catastrophic_pattern_answers_at_once_on_a_long_reply(pattern):
    text = "a" * 100_000 + "!"
    started = time.perf_counter()
    assert pattern_matches(pattern, text) in (False, True)
    assert time.perf_counter() - started < 0.5  # Python's re: about 2^100000 steps, never done


def test_patterns_still_check_answers_and_are_not_anchored():
    assert pattern_matches("^[0-9]{3}$", "123") is True
    assert pattern_matches("^[0-9]{3}$", "1234") is False
    assert pattern_matches("b", "abc") is True  # JSON Schema: search, not match
    assert pattern_matches("^\\w+@\\w+\\.\\w+$", "me@example.org") is True
    assert pattern_matches("^é+$", "ééé") is True


@pytest.mark.parametrize("pattern", ["(a)\\1", "(?=a)a", "(?<=a)b", "[", "a" * 3000])
def test_a_pattern_the_engine_cannot_run_checks_nothing(pattern):
    assert pattern_matches(pattern, "aa") is None  # the person is not blamed for the agent's pattern


def test_an_answer_is_read_through_the_pattern():
    fields = (Field("code", pattern="^(a+)+$", required=True),)
    started = time.perf_counter()
    content, problems = parse_answer(fields, "a" * 50_000 + "!")
    assert problems and "does not have the expected form" in problems[0]
    assert time.perf_counter() - started < 0.5
    assert parse_answer(fields, "aaaa") == ({"code": "aaaa"}, [])
