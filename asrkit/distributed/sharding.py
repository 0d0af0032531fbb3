"""Splitting a corpus between ranks: balanced by duration, deterministic, every utterance once."""

from __future__ import annotations

import heapq


def shard_by_duration(durations: dict[str, float], rank: int, size: int) -> list[str]:
    """The utterance ids of ``rank``'s shard, out of ``size`` shards of about equal total duration.

    Greedy longest-first assignment to the currently lightest shard (LPT scheduling: within 4/3 of
    the optimum), ties broken by utterance id so every rank computes the same split. Returns the
    ids sorted.
    """
    if not 0 <= rank < size:
        raise ValueError(f"rank {rank} out of range for {size} ranks")
    heap = [(0.0, r) for r in range(size)]
    mine = []
    for utt, dur in sorted(durations.items(), key=lambda kv: (-kv[1], kv[0])):
        load, r = heapq.heappop(heap)
        if r == rank:
            mine.append(utt)
        heapq.heappush(heap, (load + dur, r))
    return sorted(mine)
