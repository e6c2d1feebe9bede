"""A phase's course: the first failure is the phase's reason, with when it was learnt."""

from coordinator.running.course import PhaseCourse


def test_the_first_failure_is_the_reason_and_its_time_stays() -> None:
    course = PhaseCourse("t-1")
    assert course.reason is None and course.failed_iso is None
    course.fail("s1: the SUT refused the connection")
    first_at = course.failed_iso
    assert first_at is not None
    course.fail("r1 did not drain")
    assert (course.reason, course.failed_iso) == ("s1: the SUT refused the connection", first_at)


def test_its_steps_add_to_one_record() -> None:
    course = PhaseCourse("t-1")
    course.started({"s1", "s2"})
    course.started({"s3"})
    course.ended("s1")
    course.note("senders start at 2026-11-28T03:00:00+00:00")
    assert course.started_senders == {"s1", "s2", "s3"} and course.finished == {"s1"}
    assert course.notes == ["senders start at 2026-11-28T03:00:00+00:00"]
