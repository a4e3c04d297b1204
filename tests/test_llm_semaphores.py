"""`LLMClient.semaphore`: one semaphore per provider@endpoint per event loop, held by the
loop. A module table keyed on the loop kept every loop whose semaphore had waiters (a
waiter binds the semaphore to its loop) alive for the life of the process."""

from __future__ import annotations

import asyncio
import gc
import weakref

from eairdsl.agents.llm import LLMClient, LLMSettings


def test_a_loop_with_contended_semaphores_is_freed_when_it_ends() -> None:
    client = LLMClient(LLMSettings(max_connections=1))
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []
    waited: list[int] = []

    async def episode() -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        gate = client.semaphore("openai/model")
        assert client.semaphore("openai/other") is gate  # one per provider, not per model

        async def call() -> None:
            if gate.locked():
                waited.append(1)
            async with gate:
                await asyncio.sleep(0)
        await asyncio.gather(call(), call(), call())

    for _ in range(3):
        asyncio.run(episode())
    gc.collect()
    assert waited, "the calls contended for the semaphore"
    assert [ref() is None for ref in loops] == [True, True, True]


def test_each_loop_gets_its_own_semaphore() -> None:
    client = LLMClient(LLMSettings(max_connections=2))
    seen: list[asyncio.Semaphore] = []

    async def episode() -> None:
        seen.append(client.semaphore("openai/model"))

    asyncio.run(episode())
    asyncio.run(episode())
    assert seen[0] is not seen[1]
