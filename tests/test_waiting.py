"""The suite's one wait (tests/harness/waiting.py), on a fake clock that only its sleeps advance."""

from __future__ import annotations

import asyncio

import pytest

from tests.harness import waiting
from tests.harness.waiting import not_yet, wait_until, wait_until_async


@pytest.fixture
def clock(monkeypatch):
    """A clock at 0 that moves only when the wait sleeps; ``clock.sleeps`` lists each sleep."""

    class Clock:
        now = 0.0
        sleeps: list[float] = []

        def sleep(self, seconds: float) -> None:
            self.sleeps.append(seconds)
            self.now += seconds

        async def async_sleep(self, seconds: float) -> None:
            self.sleep(seconds)

    c = Clock()
    c.sleeps = []
    monkeypatch.setattr(waiting, "_clock", lambda: c.now)
    monkeypatch.setattr(waiting, "_sleep", c.sleep)
    monkeypatch.setattr(waiting, "_async_sleep", c.async_sleep)
    return c


def counter(truthy_from: int, value="ready"):
    """A predicate that answers None on its first ``truthy_from`` calls, then ``value``; ``.calls`` counts."""

    def predicate():
        predicate.calls += 1
        return value if predicate.calls > truthy_from else None

    predicate.calls = 0
    return predicate


def test_returns_the_first_truthy_value_and_sleeps_the_interval_between_calls(clock):
    predicate = counter(3, value={"leader": 2})
    assert wait_until(predicate, 10, what="a leader", interval=0.5) == {"leader": 2}
    assert predicate.calls == 4
    assert clock.sleeps == [0.5, 0.5, 0.5]


def test_a_true_answer_at_once_never_sleeps(clock):
    assert wait_until(lambda: 7, 1, what="seven") == 7
    assert clock.sleeps == []


def test_times_out_naming_what_and_the_last_value_seen(clock):
    calls = iter(range(1000))
    with pytest.raises(AssertionError) as e:
        wait_until(lambda: [] if next(calls) < 999 else None, 2, what="the records", interval=0.5)
    # called at 0, 0.5, 1, 1.5 and once more at the deadline: the last answer is named
    assert str(e.value) == "timed out after 2 s waiting for the records; last seen: []"
    assert isinstance(e.value, waiting.TimedOut)
    assert clock.sleeps == [0.5, 0.5, 0.5, 0.5]
    assert next(calls) == 5


def test_never_sleeps_past_the_deadline(clock):
    with pytest.raises(AssertionError):
        wait_until(lambda: 0, 1, what="nothing", interval=0.4)
    assert clock.sleeps == pytest.approx([0.4, 0.4, 0.2])


def test_an_assertion_of_the_predicate_is_no_timeout(clock):
    def failing():
        raise AssertionError("a wrong record")

    with pytest.raises(AssertionError, match="a wrong record") as e:
        wait_until(failing, 5, what="records")
    assert not isinstance(e.value, waiting.TimedOut)


def test_an_exception_propagates_unless_ignored(clock):
    def refused():
        raise ConnectionRefusedError("not yet")

    with pytest.raises(ConnectionRefusedError):
        wait_until(refused, 5, what="a broker")
    assert clock.sleeps == []

    with pytest.raises(AssertionError) as e:
        wait_until(refused, 1, what="a broker", interval=0.5, ignore=(OSError,))
    assert "waiting for a broker; last seen: ConnectionRefusedError('not yet')" in str(e.value)
    assert isinstance(e.value.__cause__, ConnectionRefusedError)

    answers = iter([OSError("starting"), OSError("starting"), "up"])

    def starting():
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    assert wait_until(starting, 5, what="a broker", ignore=(OSError,)) == "up"


def test_the_async_twin_awaits_coroutine_predicates_and_times_out_the_same(clock):
    predicate = counter(2, value=[b"r"])

    async def check():
        return predicate()

    assert asyncio.run(wait_until_async(check, 5, what="records", interval=0.25)) == [b"r"]
    assert asyncio.run(wait_until_async(counter(1), 5, what="plain")) == "ready"
    assert clock.sleeps == [0.25, 0.25, 0.05]

    async def never():
        return 0

    with pytest.raises(AssertionError, match=r"timed out after 1 s waiting for zero; last seen: 0"):
        asyncio.run(wait_until_async(never, 1, what="zero"))


def test_not_yet_is_false_and_names_what_the_predicate_saw(clock):
    with pytest.raises(AssertionError, match=r"waiting for leaders; last seen: \{'leader': -1\}$"):
        wait_until(lambda: not_yet({"leader": -1}), 1, what="leaders")
