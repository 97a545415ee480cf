"""When scheduled work runs (bridge/channels/schedules/schedule_times.py): in_seconds, ISO 8601 `at`,
cron (croniter), a missed cron run once, late runs, and the line shown before a run."""

from datetime import UTC, datetime, timedelta, timezone

import pytest

from bridge.channels.schedules.schedule_times import after_run, first_due, is_late, next_due, run_line, when_text
from bridge.mcp.tools import BadArguments

UTC = UTC
PARIS = timezone(timedelta(hours=1))
NOW = int(datetime(2026, 12, 5, 8, 0, 0, tzinfo=UTC).timestamp() * 1000)


def ms(*args, tz=UTC) -> int:
    return int(datetime(*args, tzinfo=tz).timestamp() * 1000)


def test_in_seconds():
    assert first_due(NOW, in_seconds=5) == NOW + 5000
    assert first_due(NOW, in_seconds=1.5) == NOW + 1500


def test_at_with_and_without_an_offset():
    assert first_due(NOW, at="2026-12-05T09:30:00Z") == ms(2026, 12, 5, 9, 30)
    assert first_due(NOW, at="2026-12-05T09:30:00+01:00") == ms(2026, 12, 5, 8, 30)
    assert first_due(NOW, at="2026-12-05T09:30:00", tz=PARIS) == ms(2026, 12, 5, 8, 30)  # the bridge's zone


@pytest.mark.parametrize(
    "at, says",
    [
        ("tomorrow", "not an ISO 8601 time"),
        ("2026-12-05T07:00:00Z", "in the past"),
        ("2031-01-01T00:00:00Z", "more than a year away"),
    ],
)
def test_bad_times_say_why(at, says):
    with pytest.raises(BadArguments, match=says):
        first_due(NOW, at=at)


def test_cron_in_the_bridges_zone():
    assert first_due(NOW, cron="30 9 * * *", tz=UTC) == ms(2026, 12, 5, 9, 30)
    assert first_due(NOW, cron="30 9 * * *", tz=PARIS) == ms(2026, 12, 5, 9, 30, tz=PARIS)
    assert next_due("0 9 * * 1-5", ms(2026, 12, 5, 9, 0), UTC) == ms(2026, 12, 7, 9, 0)  # Saturday → Monday


@pytest.mark.parametrize("cron", ["every day", "* * * *", "61 * * * *", "* * * * * *"])
def test_bad_cron_says_why(cron):
    with pytest.raises(BadArguments, match="cron"):
        first_due(NOW, cron=cron, tz=UTC)


def test_after_a_run_a_cron_goes_on_from_now_and_a_single_run_is_over():
    assert after_run(None, NOW, NOW) is None
    # down for three days: the next is after now, not each missed one
    assert after_run("0 9 * * *", ms(2026, 12, 2, 9, 0), NOW, UTC) == ms(2026, 12, 5, 9, 0)


def test_late_is_due_before_this_run_of_the_bridge_began():
    assert is_late(NOW - 1, NOW) and not is_late(NOW, NOW) and not is_late(NOW + 5, NOW)


def test_the_line_before_a_run():
    assert run_line("alice", "stretch", NOW, late=False) == "⏰ alice scheduled: stretch"
    late = run_line("alice", "stretch", NOW, late=True, tz=UTC)
    assert late.splitlines()[1] == "(late: it was due at 2026-12-05 08:00:00 +0000, while the bridge was not running)"
    assert run_line("alice", "x" * 400, NOW, False).endswith("x…")
    assert when_text(NOW, "0 9 * * *", UTC) == "next at 2026-12-05 08:00:00 +0000, then on cron 0 9 * * *"
