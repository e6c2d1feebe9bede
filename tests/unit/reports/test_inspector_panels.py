"""Inspector panels: one per table and unit, each axis titled with its unit, long series thinned
for drawing only."""

from __future__ import annotations

from reports.inspector_panels import MAX_POINTS, byte_scale, inspector_figures, inspector_panels, thin, unit_of

HOST = [
    {
        "timestamp": f"2026-11-23T00:00:{s:02d}Z",
        "host": "lab-1",
        "cpu_user_percent": "12.5",
        "cpu_system_percent": "3.0",
        "memory_total": "25000000000",
        "memory_available": "20000000000",
        "disk_written_bytes": "4096",
        "interval_s": "1.0",
    }
    for s in range(5)
]


def test_each_unit_gets_a_panel_of_its_own_titled_with_it() -> None:
    figures = inspector_figures({"i1/host-host": HOST})
    by_title = {title: (y, sorted(trace.name for trace in fig.data)) for title, y, fig in figures}
    assert by_title == {
        "Inspector i1/host-host (%)": ("percent", ["cpu_system_percent", "cpu_user_percent"]),
        "Inspector i1/host-host (bytes)": ("GiB", ["disk_written_bytes", "memory_available", "memory_total"]),
        "Inspector i1/host-host (s)": ("seconds", ["interval_s"]),
    }
    assert len(inspector_panels({"i1/host-host": HOST})) == 3


def test_a_day_long_series_is_drawn_thinned_from_all_its_samples() -> None:
    rows = [HOST[0] | {"timestamp": str(n), "cpu_user_percent": str(n % 100)} for n in range(86_400)]
    (_, _, fig), *_ = inspector_figures({"i1/host-host": rows})
    (user,) = [t for t in fig.data if t.name == "cpu_user_percent"]
    assert len(user.x) <= MAX_POINTS + 1 and user.x[-1] == "86399"


def test_units_come_from_the_inspectors_column_names() -> None:
    assert [unit_of(c) for c in ("cpu_user_percent", "mem_used", "memory", "publish_rate", "messages", "size")] == [
        "%",
        "bytes",
        "bytes",
        "msg/s",
        "count",
        "bytes",
    ]


def test_a_day_of_samples_is_thinned_for_drawing_and_keeps_its_ends() -> None:
    day = list(range(86_400))
    shown = thin(day)
    assert len(shown) <= MAX_POINTS + 1 and shown[0] == 0 and shown[-1] == 86_399
    assert thin(day[:100]) == day[:100]


def _queues(*names: str) -> list[dict[str, str]]:
    return [
        {"timestamp": f"2026-11-23T00:00:0{s}Z", "vhost": "/", "queue": name, "messages": str(s), "memory": "300000"}
        for s in range(3)
        for name in names
    ]


def test_the_tests_own_queues_are_drawn_and_the_brokers_others_wait_in_the_legend() -> None:
    table = {"i1/rabbitmq-queues": _queues("other-team-q", "maestro-q", "orders-7", "orders-12")}
    # The senders' URLs name maestro-q, and orders-%d numbered per client.
    (title, _, fig), *_ = inspector_figures(table, ["maestro-q", "orders-%d"])
    assert title.endswith(": the test's destinations; the broker's 1 other in the legend")
    visible = {t.name: t.visible for t in fig.data}
    assert visible == {
        "//maestro-q messages": True,
        "//orders-12 messages": True,
        "//orders-7 messages": True,
        "//other-team-q messages": "legendonly",
    }, visible
    # Drawn first, so that the cap on a panel's traces never leaves one of the test's out.
    assert [t.name for t in fig.data][-1] == "//other-team-q messages"
    # No destination of the test among them (a host table, or other queues): all drawn.
    (title, _, fig), *_ = inspector_figures(table, ["not-here"])
    assert title == "Inspector i1/rabbitmq-queues (count)" and {t.visible for t in fig.data} == {True}


def test_bytes_are_drawn_in_the_binary_unit_their_largest_value_reads_in() -> None:
    assert byte_scale(0) == ("B", 1.0) and byte_scale(1023) == ("B", 1.0)
    assert byte_scale(1024) == ("KiB", 1024.0) and byte_scale(300_000) == ("KiB", 1024.0)
    assert byte_scale(25_000_000_000) == ("GiB", 1024.0**3) and byte_scale(1e18) == ("TiB", 1024.0**4)
    by_title = {title: (y, fig) for title, y, fig in inspector_figures({"i1/host-host": HOST})}
    axis, fig = by_title["Inspector i1/host-host (bytes)"]
    assert axis == "GiB"  # memory_total 25,000,000,000 B
    (total,) = [t for t in fig.data if t.name == "memory_total"]
    assert total.y[0] == 25_000_000_000 / 1024**3


def test_a_busy_broker_s_queues_past_the_cap_are_said_to_be_left_out() -> None:
    # 60 queues of other users, and the test's own, which sorts last by name: it is drawn first.
    table = {"i1/rabbitmq-queues": _queues(*(f"a-team-{n:02d}" for n in range(60)), "zz-maestro-q")}
    by_title = {
        title.split(" (")[1].split(")")[0]: (title, axis, fig)
        for title, axis, fig in inspector_figures(table, ["zz-maestro-q"])
    }
    title, _, fig = by_title["count"]
    assert fig.data[0].name == "//zz-maestro-q messages" and fig.data[0].visible is True
    assert len(fig.data) == 40
    assert title.endswith(
        ": the test's destinations; 39 of the broker's 60 others in the legend (all of them in the CSV)"
    )
    # The byte axis reads in the unit of what is drawn at first, the test's queue (300,000 B here).
    assert by_title["bytes"][1] == "KiB"


def test_a_rate_not_yet_known_is_a_gap_in_its_line_not_a_key_or_a_zero() -> None:
    """The RabbitMQ inspector leaves a new queue's rate empty until two refreshes have counted
    it (inspector.sources.RefreshedRates): the column is still a figure, drawn with a gap."""
    rates = ["", "", "200.0", "200.2"]
    rows = [
        {"timestamp": f"2026-11-28T11:00:0{s}Z", "vhost": "/", "queue": "q", "publish_rate": rate}
        for s, rate in enumerate(rates)
    ]
    ((title, axis, fig),) = inspector_figures({"i1/rabbitmq-queues": rows})
    assert (title, axis) == ("Inspector i1/rabbitmq-queues (msg/s)", "messages per second")
    (trace,) = fig.data
    # None where the cell is empty: Plotly leaves a gap there (a hostile pass found the points
    # dropped, and a straight ramp drawn across the unknown seconds).
    assert trace.name == "publish_rate" and list(trace.y) == [None, None, 200.0, 200.2]
    assert len(trace.x) == 4 and not trace.connectgaps
