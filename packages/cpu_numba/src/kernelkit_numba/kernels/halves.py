"""Two shares of a product at two threads (issue 11, session 9; docs/numba.md, "MobileNetV2 and the
transformer at two threads (issue 11, session 9)"): one job of two shards, the caller's first, the
worker's second, instead of 4-8 shards that whichever thread is free claims.

The calling thread publishes the job and claims shard 0 at once; a worker (spinning through the
run: the heartbeat) arrives ~20 us later and claims shard 1. So the assignment is sticky, the caller
always runs the first share (the first output channels / weight panels) and the worker the second,
and there is one claim and one GIL hand-off per thread a layer. A worker that does not come in time
leaves shard 1 to the caller, as any job does (the pool's rules are unchanged).

The caller's share is a little larger than half, by the worker's late start: ``caller_parts``
gives the caller ``(T + d) / 2T`` of a product of T flops, d = ``LEAD_FLOPS`` (the flops one core
does while the worker comes), so that both finish together.
"""
from __future__ import annotations

from .. import config

# On: the float32 1x1 convolutions (ftile's rows and cols tiles) and the Gemm/MatMul micro-kernels
# (fgemm) run as two shares at a thread budget of two (more threads: the shards as before)
ON = True
# the flops one core does while the worker comes to a job: ~20 us from publication to the worker's
# first shard on the Xeon (docs/numba.md, session 7) at ~100 GFLOP/s
LEAD_FLOPS = 2.0e6
MAX_SHARE = 0.75  # the caller's share at most this
# 1x1 convolutions on the rows tiles: "channels" splits the output channels (each core streams half
# of the weights and reads the whole input), "pixels" the output pixels (half of the input, all of
# the weights), "auto" the one that leaves each core less to read: channels where the layer has more
# output channels than pixels (its weights, M x K, outweigh its input, K x L: MobileNetV2's 14x14
# expansions), else pixels (the 56x56 and 28x28 layers, whose weights are a few KiB, and 24- or
# 32-channel projections, 3-4 panels of 8: too coarse to split evenly). The cols tiles (7x7 maps)
# always split their 48-channel panels.
CONV_AXIS = "auto"
# Attention at two threads: its heads in two shards (not four)
ATTENTION = True
# A product of at least WAKE_FLOPS is published although the worker sleeps (issue 11, session 10): the
# publication wakes it, and it takes the second share 50-150 us late while the caller runs the first,
# which beats the caller running both once a share takes longer than that (~1.5e7 flops at ~100
# GFLOP/s). Session 9 ran every product on the caller while the worker slept, and in ResNet-50 at two
# threads on the Xeon that became a chain: the 56x56 1x1 layers (1.4-2.8 ms at one thread) ran on the
# caller alone run after run (threads_alone.py --interleave: conv59, 68, 76, 84, 93 without a job,
# 9 ms a run), because each took longer than the pool's BEAT_IDLE_S (1 ms), so the worker the next
# heartbeat woke spun out and slept again before the next such node looked. 0: never.
WAKE_FLOPS = 3.0e7
# two-share calls run on the caller alone (the worker asleep), and those published although it slept
stats = {"asleep": 0, "woken": 0}


def conv_axis(m_n: int, l_n: int) -> str:
    """The split of a 1x1 convolution of ``m_n`` output channels and ``l_n`` pixels on the rows tiles."""
    if CONV_AXIS != "auto":
        return CONV_AXIS
    return "channels" if m_n > l_n else "pixels"


def usable(threads: int) -> bool:
    """Whether a call at this thread budget runs as two shares."""
    return ON and threads == 2


def caller_parts(parts: int, flops: float) -> int:
    """The parts (panels, pixel tiles) of ``parts`` that the caller runs, for a product of ``flops``:
    at least one and at most ``parts - 1`` (parts >= 2)."""
    share = 0.5 + 0.5 * LEAD_FLOPS / max(flops, 1.0)
    share = min(MAX_SHARE, share)
    return max(1, min(parts - 1, round(parts * share)))


def worker_asleep() -> bool:
    """Whether the pool's worker sleeps although it has its spin loop (``ShardPool.workers_asleep``)."""
    return config._POOL.workers_asleep()


def worker_spinning() -> bool:
    """Whether the pool has a spinning worker now (``ShardPool.workers_spinning``)."""
    return config._POOL.workers_spinning()


def alone(flops: float = 0.0) -> bool:
    """Whether a two-share product of ``flops`` (0: not given) runs on the calling thread alone, no job:
    the worker asleep and the product under ``WAKE_FLOPS`` (``stats``: counted, and the products
    published to wake the worker)."""
    if not worker_asleep():
        return False
    if not WAKE_FLOPS or flops < WAKE_FLOPS:
        stats["asleep"] += 1
        return True
    stats["woken"] += 1
    return False


def run(first, second, flops: float = 0.0) -> None:
    """``first()`` on the calling thread and ``second()`` on the worker (or the caller, when the worker
    does not come in time), through the shard pool at the call's budget. With the worker asleep
    (its spin loop built, no heartbeat since its spin ended: it would come 50-150 us late, so that
    the caller, done with its share, waits for the worker's whole share), both on the caller, no job:
    the next node's heartbeat wakes it; unless the product (``flops``, 0: not given) has at least
    ``WAKE_FLOPS``: then the job, whose publication wakes the worker."""
    if alone(flops):
        first()
        second()
        return

    def shard(i):
        if i == 0:
            first()
        else:
            second()

    config.run_shards(shard, 2)
