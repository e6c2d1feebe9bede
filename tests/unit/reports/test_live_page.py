"""The live page renders for any test id (its script is a %-template: a bare % breaks it)."""

import html

from protocol.live import LiveUpdate
from reports.live_page import live_page


def test_the_page_holds_its_parts_and_the_id_safely() -> None:
    page = live_page("t-1</script>")
    for part in ('id="status"', 'id="workload"', 'id="totals"', 'id="throughput"', 'id="latency"', 'id="peers"'):
        assert part in page
    assert "'CPU %'" in page
    # The id in the script cannot end it: its </ is escaped.
    assert 'const testId = "t-1<\\/script>";' in page


def test_the_first_screen_says_what_runs_before_the_stream_connects() -> None:
    """#40: the workload came only with the first event, below the status."""
    workload = "fixed-rate: 50 msg/s per client, 100 in all; <b>2</b> client(s)"
    update = LiveUpdate("t-2", workload=workload, elapsed_s=4.4, expected_s=20.0, state="running")
    page = live_page("t-2", update)
    said = f'<p id="workload">Workload: {html.escape(workload)}</p>'
    assert said in page and page.index(said) < page.index('<p id="status">running: 4 s of 20 s</p>')
    assert '<p id="status">connecting</p>' in live_page("t-3")
