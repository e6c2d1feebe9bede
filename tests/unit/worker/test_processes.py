from __future__ import annotations

from worker.processes import split_clients


def test_clients_split_into_near_equal_contiguous_ranges() -> None:
    assert split_clients(10, 3) == [range(0, 4), range(4, 7), range(7, 10)]
    assert split_clients(4, 2) == [range(0, 2), range(2, 4)]
    # Never an empty process: more processes than clients means one client each.
    assert split_clients(2, 8) == [range(0, 1), range(1, 2)]
    assert split_clients(5, 1) == [range(0, 5)]
