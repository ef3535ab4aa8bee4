"""worker/callbacks.Wakes (issue 31; new coverage): a callback wakes the attempt waiting for its
task; one that arrives before the attempt waits (the callback beat the acceptance record) is
remembered, so the attempt does not sit out a whole safety-net interval; without a callback the
wait ends at the safety net."""

from __future__ import annotations

import asyncio

from geo_pipeline.worker.callbacks import Wakes, wake_key


def test_a_callback_wakes_the_waiting_attempt() -> None:
    async def main() -> tuple[bool, bool]:
        wakes = Wakes()
        key = wake_key("dataforseo", "t-1")
        waiter = asyncio.create_task(wakes.wait(key, 3600.0))
        while key not in wakes.waiting:
            await asyncio.sleep(0)
        wakes.wake(wake_key("dataforseo", "t-2"))  # another task's callback wakes nobody here
        await asyncio.sleep(0)
        other_done = waiter.done()
        wakes.wake(key)
        return other_done, await waiter

    other_done, woken = asyncio.run(main())
    assert not other_done and woken


def test_an_early_callback_is_remembered_and_used_once() -> None:
    async def main() -> tuple[bool, bool]:
        wakes = Wakes()
        key = wake_key("brightdata", "s_1")
        wakes.wake(key)  # before anyone waits
        first = await wakes.wait(key, 3600.0)
        second = await wakes.wait(key, 0.01)  # used up: the safety net ends this one
        return first, second

    assert asyncio.run(main()) == (True, False)


def test_without_a_callback_the_safety_net_ends_the_wait() -> None:
    async def main() -> tuple[bool, int]:
        wakes = Wakes()
        got = await wakes.wait(wake_key("cloro", "x"), 0.01)
        return got, len(wakes.waiting)

    assert asyncio.run(main()) == (False, 0)
