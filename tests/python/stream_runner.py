"""A stream runner process for tests/python/e2e.py's recovery scenario: the real SDK's
`queen.streams` over the broker, killed with SIGKILL by the scenario and started again.

Usage: stream_runner.py <broker url> <source queue> <sink queue> <query id>

The stream: a gate that counts each source message into the partition's state
(`n`, `sum` of `data.n`) and lets it through to the sink. Each cycle commits the state,
the sink pushes and the source ack together, so after any kill every source message is
counted once and in the sink once. Prints `ready <server query id>` once registered.
"""

import asyncio
import sys
import time

from queen import Queen, Stream


def count(value, ctx):
    ctx.state["n"] = ctx.state.get("n", 0) + 1
    ctx.state["sum"] = ctx.state.get("sum", 0) + value["n"]
    # Slow enough that the scenario's kill lands between cycles of a running stream.
    time.sleep(0.03)
    return True


async def main(url, source, sink, query_id):
    async with Queen(url) as q:
        runner = await (
            Stream.from_(q.queue(source))
            .gate(count)
            .to(q.queue(sink))
            .run(query_id=query_id, url=url, batch_size=5, max_partitions=1)
        )
        print("ready", runner.metrics()["serverQueryId"], flush=True)
        while True:
            await asyncio.sleep(1)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
