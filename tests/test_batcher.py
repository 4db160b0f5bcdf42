"""The server's micro-batcher (matching.serving.batcher.Batcher) with a worker that records its batches: which jobs
run together, in what order, and that a lone request is not held back."""

from __future__ import annotations

import asyncio

from matching.inference.queries import ClassifyQuery
from matching.serving.batcher import GATHER_TURNS, Batcher


class Recorder:
    """A worker that answers each job with its own id and records the ids of every batch it is given."""

    def __init__(self):
        self.batches: list[list[int]] = []

    def answer(self, jobs):
        self.batches.append([job.id for job in jobs])
        return [(job.id, job.id) for job in jobs]


QUERY = ClassifyQuery((("a text", "another text"),))


def batches_of(arrivals: list[int], max_batch_size: int = 32, batch_timeout: float = 0.0) -> tuple[list, list]:
    """The batches the worker was given, and the answers, when client i asks after `arrivals[i]` turns of the event
    loop (each client one request)."""
    recorder = Recorder()

    async def scenario():
        batcher = Batcher(recorder, "test", max_batch_size, batch_timeout)
        batcher.start()

        async def client(turns: int):
            for _ in range(turns):
                await asyncio.sleep(0)
            return await batcher.ask(QUERY)

        try:
            return await asyncio.gather(*(client(t) for t in arrivals))
        finally:
            await batcher.stop()

    answers = asyncio.run(scenario())
    return recorder.batches, answers


def test_requests_arriving_turn_after_turn_run_as_one_batch():
    """Clients answered together come back a little apart: each one a turn of the event loop after the last. They
    run as one batch, not the first alone and the rest behind it (batches of 1, 7 before GATHER_TURNS)."""
    batches, answers = batches_of(list(range(8)))
    assert [len(b) for b in batches] == [8]
    assert answers == sorted(answers)  # each client got its own job's answer, in the order they asked


def test_gathering_stops_after_quiet_turns_and_the_next_batch_takes_the_latecomer():
    late = GATHER_TURNS + 6  # well after the batch was closed: the next batch's
    batches, _ = batches_of([0, 0, 1, late])
    assert [len(b) for b in batches] == [3, 1]


def test_a_lone_request_is_answered_without_waiting_for_others():
    batches, answers = batches_of([0])
    assert batches == [[0]] and answers == [0]


def test_a_batch_holds_at_most_max_batch_size_jobs():
    batches, answers = batches_of([0] * 40 + [1] * 5, max_batch_size=16)
    assert [len(b) for b in batches] == [16, 16, 13]
    assert sorted(answers) == list(range(45))


def test_batch_timeout_waits_for_a_request_after_the_quiet_turns():
    batches, _ = batches_of([0, GATHER_TURNS + 6], batch_timeout=5.0)
    assert [len(b) for b in batches] == [2]
