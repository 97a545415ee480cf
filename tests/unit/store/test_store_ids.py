"""new_id: fixed width, unique, and lexical order == creation order."""

import threading

import pytest

import store.ids as ids
from store import new_id


@pytest.fixture
def clock(monkeypatch):
    """A settable clock, from a generator state as fresh as a new process."""
    now = [1_700_000_000_000]  # milliseconds
    monkeypatch.setattr(ids, "_last_ms", 0)
    monkeypatch.setattr(ids, "_counter", 0)
    monkeypatch.setattr(ids.time, "time_ns", lambda: now[0] * 1_000_000 + 999_999)
    return now


def test_ids_made_in_one_millisecond_stay_sorted_and_unique(clock):
    made = [new_id() for _ in range(5000)]
    assert made == sorted(made)
    assert len(set(made)) == len(made)
    assert {len(i) for i in made} == {26}
    assert {i[:12] for i in made} == {f"{1_700_000_000_000:012x}"}


def test_many_ids_in_a_row_are_sorted_unique_and_fixed_width():
    made = [new_id() for _ in range(20000)]
    assert made == sorted(made)
    assert len(set(made)) == len(made)
    assert all(len(i) == 26 and int(i, 16) >= 0 for i in made)


def test_ids_start_with_the_time_in_milliseconds(clock):
    clock[0] = 0x123456789AB
    assert new_id().startswith("0123456789ab")


def test_a_clock_going_back_never_makes_ids_go_back(clock):
    first = new_id()
    clock[0] -= 5000  # NTP stepped the clock back five seconds
    later = [new_id() for _ in range(10)]
    assert [first, *later] == sorted([first, *later])
    assert len({first, *later}) == 11
    clock[0] += 6000  # and forward again: the real time is used again
    assert new_id()[:12] == f"{clock[0]:012x}"


def test_counter_overflow_borrows_the_next_millisecond(clock, monkeypatch):
    monkeypatch.setattr(ids, "_COUNTER_MAX", 3)
    made = [new_id() for _ in range(10)]
    assert made == sorted(made) and len(set(made)) == 10
    assert [int(i[:12], 16) - clock[0] for i in made] == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]


def test_ids_from_several_threads_are_unique():
    made: list[str] = []
    lock = threading.Lock()

    def work():
        mine = [new_id() for _ in range(3000)]
        assert mine == sorted(mine)
        with lock:
            made.extend(mine)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(made)) == 12000
