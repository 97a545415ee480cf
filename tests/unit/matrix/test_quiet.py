"""The rooms read back once the homeserver is quiet after some activity (bridge/matrix/quiet.py)."""

from bridge.matrix.quiet import ACTIVE, QUIET, READ_BEFORE, Quiet


def test_an_idle_bridge_reads_nothing_and_has_nothing_to_check():
    quiet = Quiet()
    assert quiet.next_check(1000.0) is None
    assert quiet.due(1000.0) == {}


def test_while_transactions_come_nothing_is_read_back():
    quiet = Quiet()
    quiet.came(["!a"], 100.0)
    assert quiet.next_check(100.0) == QUIET
    assert quiet.due(100.0 + QUIET / 2) == {}
    quiet.came([], 100.0 + QUIET / 2)  # another transaction (of another room)
    assert quiet.due(100.0 + QUIET) == {}


def test_once_quiet_the_active_rooms_are_read_from_before_the_last_transaction():
    quiet = Quiet()
    quiet.came(["!a", "!b"], 100.0)
    quiet.came([], 104.0)
    since = int((104.0 - READ_BEFORE) * 1000)
    assert quiet.due(104.0 + QUIET) == {"!a": since, "!b": since}


def test_a_room_read_back_is_read_again_every_quiet_period_while_it_stays_active():
    quiet = Quiet()
    quiet.came(["!a"], 100.0)
    quiet.read(["!a"], 100.0 + QUIET)
    assert quiet.next_check(100.0 + QUIET) == QUIET
    assert quiet.due(100.0 + QUIET * 1.5) == {}
    assert list(quiet.due(100.0 + QUIET * 2)) == ["!a"]


def test_a_room_no_longer_active_is_forgotten_and_the_bridge_is_idle_again():
    quiet = Quiet()
    quiet.came(["!a"], 100.0)
    later = 100.0 + ACTIVE + 1
    assert quiet.due(later) == {}
    assert quiet.next_check(later) is None


def test_a_new_event_in_a_room_makes_it_active_again_and_waits_for_quiet():
    quiet = Quiet()
    quiet.came(["!a"], 100.0)
    quiet.read(["!a"], 100.0 + QUIET)
    quiet.came(["!a"], 115.0)
    assert quiet.due(115.0 + QUIET - 1) == {}
    assert list(quiet.due(115.0 + QUIET)) == ["!a"]
