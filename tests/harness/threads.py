"""Running a harness step on several things at once (brokers, clusters), each on a thread of its own."""

from __future__ import annotations

import threading


def in_parallel(act, items) -> dict:
    """``act(item)`` for every item at once, each on a thread; {item: its result}. The first error is
    raised here, once every thread has ended."""
    results: dict = {}
    errors: list[BaseException] = []

    def run(item) -> None:
        try:
            results[item] = act(item)
        except BaseException as e:  # noqa: BLE001 - raised on the caller's thread below
            errors.append(e)
    threads = [threading.Thread(target=run, args=(item,)) for item in items]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def start_together(starts: dict, stops: dict) -> dict:
    """Start several things at once (``{name: start()}``, each on a thread); {name: what its start returned}.
    If one fails, those that started are stopped (``stops[name](started)``) and the first error is raised."""
    results: dict = {}

    def start(name) -> None:
        results[name] = starts[name]()
    try:
        in_parallel(start, list(starts))
    except BaseException:
        for name, started in results.items():
            stops[name](started)
        raise
    return results
