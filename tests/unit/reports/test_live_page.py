"""The live page renders for any test id (its script is a %-template: a bare % breaks it)."""

from reports.live_page import live_page


def test_the_page_holds_its_parts_and_the_id_safely() -> None:
    page = live_page("t-1</script>")
    for part in ('id="status"', 'id="workload"', 'id="totals"', 'id="throughput"', 'id="latency"', 'id="peers"'):
        assert part in page
    assert "'CPU %'" in page
    # The id in the script cannot end it: its </ is escaped.
    assert 'const testId = "t-1<\\/script>";' in page
