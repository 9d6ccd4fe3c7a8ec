"""The ResNets' convolutions at two threads, batch 1, handed over in compiled code (issue 11, session
11; docs/numba.md, "The ResNets on two cores, handed over in compiled code").

At a thread budget of two the ResNets' convolutions went through the shard pool: a job handed over in
Python (20-60 us: the GIL, a worker that may sleep, the end wait; 120-275 us a layer of end waits on
the 64@56 Winograd layers on the Xeon). MobileNetV2's layers run as two sticky halves on fpair's
helper thread (cpair.py). Here every kind of convolution a ResNet has at batch 1 does the same, so
that no node needs the pool (and, with no pool job in the process, the pool has no worker to keep
awake: cpair's rule "no pair while the pool's worker spins" holds by itself):

- **3x3 stride 1 as F(4x4, 3x3) by tiles** (``WINO``): each side runs its run of tiles in blocks
  (winograd.TILE_BYTES): the input transform of its tiles (every channel), the 36 products on ftile's
  batched tiles (the weights packed once for them, also where the one-thread path takes BLAS: 64 input
  channels) and the output transform (bias, residual, Relu), in buffers of its own thread's. The
  maps of ``WINO4_MIN_PIXELS`` and more take it (the 14x14 layers too, which run F(2x2, 3x3) at one
  thread: its sharded phases had no half).
- **The direct convolutions** (``DIRECT``: fdirect.py, the 3x3/2 layers of K >= 257 and the 512@7
  layers): the caller pads the input (``fdirect.pad_planes``), then each side runs half of the
  two-thread plan's shards (48-channel panel, block of output rows).
- **The 1x1 layers and the stem** (``POINTWISE``): cpair.py's pairs (ftile's rows and cols tiles, the
  implicit GEMM), taken by the bound parallel call too (conv_serial.py).

Each side is reached through one compiled ``half(desc_address, side)`` (this module's, by address,
the descriptor's first word, as cpair's and fgemm's), run by fpair's helper (``pair_serve``); the
caller's side is ``pair_run`` (the per-call addresses, then fpair's ``pair_job``). Where the helper does
not spin or is backed off (``pairs.PairServer``'s rules: ``STALL_S`` with fpair's slack of half the
caller's own half, ``MISSES``, the pool's back-off), the caller runs both sides itself (``alone``):
the one-thread work, no pool job. While the pool's worker spins (a model with pooled nodes) the bound
call runs ``Conv.compute`` as before. ``ON = False`` (or ``KERNELKIT_F32_PAIR=off``,
``KERNELKIT_NUMBA_SPIN_US=0``) turns all of it off.
"""
from __future__ import annotations

import functools
import threading

import numba
import numpy as np

from .. import config, shards
from ..cache import CLOSURE_KEY
from ..config import jit
from . import cpair, fdirect, fpair, ftile, pairs, winograd
from .pairs import SLOT, _call2, _cas, _ptr, claim_ends, count_up, wait_count

ON = True  # False: the ResNets' parallel convolutions go through the shard pool (Conv.compute) as before
WINO = True  # the F(4x4, 3x3) layers pair (False: for A/B runs)
DIRECT = True  # fdirect's direct convolutions pair
POINTWISE = True  # the parallel 1x1 layers and stems take cpair's pairs (conv_serial.py)
# output pixels from which a 3x3 stride-1 layer pairs as F(4x4, 3x3) by tiles (winograd.usable4's 392 at
# batch 1); smaller maps pair as F(2x2, 3x3) by output channels (WINO2). F(4x4) by tiles on the 14x14
# layers (16 tiles) had each side read all 36 x 256 x 256 transformed weights (9.4 MB) for 8 tiles
WINO4_MIN_PIXELS = 392
WINO2 = True  # the F(2x2, 3x3) layers pair (by output channels: the weights' halves)
# The bytes of v and products a block of a side's F(4x4) tiles takes (winograd.tile_blocks; None:
# winograd.TILE_BYTES, 2 MiB: the 64@56 layers' 98 tiles a side in one block of 1.8 MB, the 128@28 layers' 25)
PAIR_TILE_BYTES = None
KIND = 2  # ftile's avx512 variant (fdirect's tiles need it)
# A stall (the caller waited more than pairs.STALL_S plus half its own half for the helper's) backs the
# pairs off only when the one before came within HICCUP_S (the shard pool's STALL_PAIR_S): on the Xeon
# (the device call of session 11) quiet blocks of ResNet-18 and -50 saw 1-4 isolated stalls, each of
# which backed every pair off for 50-200 ms (the block median 30-35 ms against 17-19 without). 0: every
# stall backs off (fpair's and cpair's rule). 0.1 s, not the pool's 1 s: at 1 s the final code's quiet
# blocks still backed off 1-7 times (two hiccups a second apart); a helper without its core stalls on
# nearly every pair call (ms apart), which 0.1 s still catches. Xeon (the lead's call E, session 11,
# turns.py resnet18,resnet50 --variant hic01=kernels.rnpair.HICCUP_S=0.1, 8 rounds quiet, 4 loaded):
# quiet default(1.0) / hic01 ResNet-50 1.13 (0.91-1.86; 5 of 8 rounds), ResNet-18 1.01; loaded 1.06, 1.07.
HICCUP_S = 0.1
# The stalls within HICCUP_S that back off (pairs.PairServer.result's hiccups; 2: a stall and the one before it). A
# helper whose core is taken stalls (or misses, pairs.MISSES) on nearly every call, ms apart; a vCPU's hiccup on the
# Xeon is one wait of a few hundred us now and then, and the quiet blocks of session 12 still backed off 1-3 times
# on two of them 0.1 s apart. Kept at 2: on the Xeon (session 13's call, docs/numba.md "The ResNet pairs' stall
# bursts") the quiet stalls came in bursts (3-10 in one 0.3 s block, none in most), so 3 backed off in as many
# blocks (7 of 32 against the default's 5), and default / HICCUPS=3 was 0.89-0.97; under load no block stalled at all.
HICCUPS = 2
# > 0: a back-off of these pairs fired by their stalls (the hiccup rule) lasts this long, never doubling, and so does
# the shard pool's that follows it (follow, POOL_BACKOFF); under load the pool's look at its end
# (shards.ShardPool.FREE_CORES) still holds it, doubling, while the other core stays busy. 0: it doubles from
# pairs.MIN_BACKOFF_S while back-offs come within pairs.CALM_S of each other (both the pairs' and the pool's), so a
# quiet block's second hiccup back-off ran 100 ms at one thread, its third 200 ms (issue 11, session 13). Off: on the
# Xeon default / 0.05 s was 0.98 (ResNet-18) and 0.99 (ResNet-50) quiet, within the spread between processes.
HICCUP_BACKOFF_S = 0.0
# The stall bursts (issue 11, session 15; docs/numba.md, "The ResNet pairs' stall bursts, counted in layers"): call U
# (session 14) found the slow quiet blocks pairing 31-39 of ResNet-50's 55 layers a run, the helper's halves 1.35x the
# caller's all through them, and the hiccup rule firing back-offs that double (50, 100, 200 ms, and the pool's
# with them: most of a 0.3 s block on one thread). Two switches for that, both in rule():
# - STALL_SLACK: a stall is a wait past pairs.STALL_S plus this fraction of the caller's own half (0.5: fpair's
#   slack, as before); 1.0: only a call that took longer paired than the caller alone would have (the helper's half
#   past twice the caller's) is a stall, so that a helper on a slower core, which still pays, backs nothing off.
# - STALL_SKIP: > 0, a back-off the stall rule fires is the next STALL_SKIP pair calls (layers) on the caller,
#   doubling while it fires again soon after (pairs.SKIP_CALM, SKIP_MAX), not a time and not the pool's; 0: the
#   time-based back-off (HICCUP_BACKOFF_S, doubling) as before. Under load no stall fires (session 13's call: 0 in
#   40 loaded blocks; the helper's misses back off, pairs.MISSES, and those stay time-based).
# - STALL_NET: a stall counts toward the hiccup rule only where the paired calls since the last stall, it included,
#   lost time against the caller alone (the caller's own halves less its waits, summed, below 0: PairServer.result's
#   net); a stall on a slower helper that the calls before it paid for is forgotten. False: every stall counts.
# Read when a layer binds (cpair's pairs keep their rule) and at each rnpair call.
STALL_SLACK = 0.5
STALL_SKIP = 0
STALL_NET = False
# A back-off of these pairs backs the shard pool off too (its FREE_CORES look at the back-off's end holds
# it while the other core stays busy, and config.current_threads() says 1 meanwhile: every layer on its
# one-thread path). The pairs' own back-off restarts at 50 ms whenever the last one ended more than
# pairs.CALM_S before (each block of turns.py --mode loaded: 3-4 back-offs a 0.3 s block on the Xeon,
# the tries between them beside the busy loop). False: the pairs' back-off alone.
POOL_BACKOFF = True
# A layer that finds the helper not spinning or backed off (pairs.PairServer.usable) runs numba 1t's call of it: the
# general path (Conv.compute) at a budget of one thread, where the bound call passes it (conv_serial._paired_call),
# instead of both halves of the pair one after the other on the caller (issue 11, session 15; docs/numba.md,
# "Layers alone under load"): the one-thread session's kernels (F(4x4) on one block of every tile, its BLAS
# products at 64 input channels, F(2x2) by phases, fdirect's one-thread plan with fdirect.AHEAD), bit for bit its
# output. False: both halves on the caller (the pair's kernels, bit for bit the paired call's output). Off: on the
# Xeon (session 15's two calls, loaded ResNet-18) its share was not told apart: with shards.ShardPool.HOLD_S on, a
# process under load has its pool backed off and its layers on the general path already, and hold / hold with it
# was 55.70 / 53.48 ms in one call, 43.18 / 44.94 in the other; alone, default / it 1.07 (0.62-1.14).
ALONE_SERIAL = False
# A layer whose call finds the shard pool's worker spinning (a model with pooled nodes: its worker spins through the
# run, and a pair's helper would be a third spinning thread on two cores) runs its two halves as that pool's job of
# two shards (side_run: each side's code as the pair's, side 1 in the caller's own buffers), the caller claiming the
# first and the worker the second, so that its output is the pair's bits whoever runs which half and whether the
# worker spins or not (issue 11, session 20; docs/numba.md, "Pairs beside a spinning pool"). False: the general path
# (Conv.compute on the pool's shards: its own order of sums), as before; a session's two-thread bits then moved with
# the worker's state (the detection head's four 3x3 layers: three outputs in 20 runs once the worker had built its
# spin loop, up to 2.1e-5 apart). Dev box, turns.py detection_head, 5 rounds: default / off 0.89 (0.61-1.28); Xeon
# (session 20's calls D3, D4, with POOL_STALL_SHARE) 0.97 and 0.95. The same for a layer that finds the pair's slot held
# by another caller (fpair's one helper serving another session's layer at once; pair_run's 3), which took the
# general path before too.
BESIDE_POOL = True
# Such a job's stall (shards.ShardPool.run's stall_share): a wait for the worker's half past this share of the caller's
# own half. 1.0: only a wait that made the layer slower than the caller alone (rnpair.STALL_SLACK's 1.0), so that a
# worker on a slower core (the H200 host's uneven cores, 1.2-1.3x) backs nothing off; a worker that loses its core
# mid-half (a time slice, ms) still does. 0.5: the pool's own rule for its many small shards. Xeon (session 20's
# call D2, detection_head, 6 rounds): at 0.5 the default's blocks that paid the pool's stall back-offs (4 of 6; 1-4
# back-offs, 17-28 jobs on the caller alone) ran 31-46 ms, those without 21.6-21.7 against the general path's 22-29.
POOL_STALL_SHARE = 1.0
# Halves that cannot stall (issue 11, session 12): an F(4x4) layer's tiles in DYN_CHUNKS chunks (fewer where a
# chunk would have under DYN_MIN_TILES tiles), claimed from one word as the sides go, the caller from the front
# and the helper from the back (cpair.DYNAMIC's claim word), so that a helper that loses its core mid-layer holds
# one chunk: the caller runs the rest and waits for that chunk alone. The stall rule then counts a wait past
# STALL_S plus one of the caller's chunks. False: the static halves (each side its half of the tiles).
# Off: a chunk reads all 36 positions' packed weights again (64@56: 590 KB, 128@28: 2.4 MB), and that cost more
# than the stalls it saved. Xeon (session 12, dyn12's call: turns.py resnet18,resnet50 --rounds 6, quiet),
# 8 chunks / static 1.07 (ResNet-18), 1.15 (ResNet-50), 4 chunks / static 1.07, 1.04 (medians; the rounds'
# best at par), though the dynamic halves stalled less (ResNet-18: no stall in 6 blocks against 1-3 in 4 of 6
# and 3 back-offs); the AMD box, one 64@56 layer alone: 8 chunks 1.20x the static halves' two blocks, 4 1.09x.
DYNAMIC = False
DYN_CHUNKS = 4
DYN_MIN_TILES = 24
# Halves that follow the sides' speeds (issue 11, session 13; docs/numba.md, "The gap between the layers and the
# run"): after each paired call of an F(4x4) layer (static halves), the cut between the caller's tiles and the
# helper's moves toward the one at which both would have finished together, from the call's cycle stamps (the
# caller's own half, the helper's start after the publish and its half: pairs.PUBLISHED ...), smoothed by
# BALANCE_GAIN and kept within BALANCE_RANGE of the tiles either side of the middle (the sides' buffers are sized
# for the largest side in that range). The output is bit for bit the even cut's at every cut (session 14: since
# session 13's jit_ordered input transform; before it, a tile's values depended on its place in its side's run of
# tiles in the last bits). Read when a layer binds. False: the even cut. Off: on the Xeon (session 13's
# call, gap_trace.py and turns.py) ResNet-50's caller waited 6.0 ms a run at the halves' ends against 0.98 (a side's
# cost is not per tile: each reads all 36 positions' weights, so a shrinking side looks slower a tile and shrinks
# on to the range's end); default / BALANCE 1.00 (ResNet-18) and 0.97 (ResNet-50) quiet, 0.99 and 0.80 loaded.
BALANCE = False
BALANCE_GAIN = 0.25
BALANCE_RANGE = 0.15
# BALANCE's cut by the sides' ends instead of their rates (issue 11, session 14; docs/numba.md, "The two-thread
# blocks that run slow in turns"): after a paired call the cut moves by FOLLOW_GAIN of the tiles that would have
# evened the sides' ends (the helper's start plus its half against the caller's half, over twice the layer's cycles
# a tile: a tile moved shortens one side and lengthens the other), at most FOLLOW_STEP of the tiles a call (at least
# one), and not at all within one tile's time; a side's fixed cost (the 36 positions' weights) then drives nothing.
# The output is bit for bit the even cut's at every cut since winograd's input transform keeps its order
# (config.jit_ordered, issue 11, session 13): test_rnpair.py::test_follow_cut. Read at each call, with BALANCE on.
FOLLOW = False
FOLLOW_GAIN = 0.5
FOLLOW_STEP = 0.02
# The same for fdirect's pairs (issue 11, session 14; docs/numba.md, "A cut that follows the cores in the 1x1
# halves"): the cut between the caller's shards (panel-major: panel, row block) and the helper's moves by
# cpair.follow_step's rule (cpair's FOLLOW_GAIN, FOLLOW_STEP, FOLLOW_RANGE around the bound cut, direct_cut), in
# shards. Each shard is the one-thread driver's, so the output is bit for bit the bound cut's at every cut
# (test_rnpair.py::test_follow_cut_direct). Read at each call. Off: not yet on the Xeon.
FOLLOW_DIRECT = False
# cpair.TAIL's claimed middle on fdirect's pairs (issue 11, session 15; docs/numba.md, "A middle that the faster core
# claims"): the shards about direct_cut (cpair.TAIL_SHARE of them, at least two) are claimed one at a time from one
# word (the caller from the front after its bulk [0, a), the helper from the back after its [b, shards)), so that the
# faster core takes more of them. Each shard is the one-thread driver's, so the output is the one-thread path's bit
# for bit whoever claims which (test_tail.py::test_tail_direct). Read when a layer binds; FOLLOW_DIRECT then holds.
# Off until session 19: with cpair.TAIL on the Xeon, default / tail 0.97 (ResNet-50) and 1.22 (ResNet-18), within the
# spread; on with cpair.TAIL since (its comment).
TAIL_DIRECT = True
# F(4x4) layers of at most BY_M_TILES tiles pair by output channels (issue 11, session 13; docs/numba.md, "ResNet-18's
# 3x3 layers at two threads"): each side transforms every tile's input itself and runs its whole weight panels (the
# cut of wino2_pair: the sides' channels within one panel) at every position, so that each side reads half the
# transformed weights (128@28: 1.2 of 2.4 MB) instead of all of them for half the tiles. Read when a layer binds.
# 0: every F(4x4) layer by tiles (49: the 28x28 layers, 196: the 56x56 ones too). Off: on the Xeon (session 13,
# nodes_ab2t.py) default / 49 was 0.84-0.87 on ResNet-18's 128@28 layers and 0.72 on ResNet-50's, default / 196
# 0.68-0.76 on the 64@56 ones: the input transform that both sides repeat costs more than half the weights saves.
BY_M_TILES = 0
# fdirect's halves' weight prefetch (issue 11, session 15; docs/numba.md, "The weights' prefetch in the two-thread
# halves"): > 0, the direct pairs' tiles (ResNet-50's 3x3/2 layers of K >= 257 and 512@7 layers, ResNet-18's 3x3/2
# and 512@7 ones at two threads) prefetch their weights' row k + DIRECT_AHEAD into L1 at step k
# (fdirect.driver_ahead, as a one-thread session's with fdirect.AHEAD). Read when a layer binds: every pair of this
# module takes the compiled half of its value (one per value a process: half_address(ahead); the F(4x4) and F(2x2)
# ops' code the same). The prefetch changes no arithmetic: the halves stay the one-thread path's bit for bit. 0: off.
# On (16, with cpair.COLS_AHEAD): on the Xeon (benchmarks/ahead15_round.sh, nodes_ab2t.py) ResNet-50's 512@7 and 3x3/2
# layers 1.00-1.30x faster per kind, ResNet-18's 1.17-1.28x (its Conv sum 1.10x); in the lead's call L2a (turns, alone
# on CPUs 0,1, 8 rounds, docs/benchmarks.md "Round 15") default / both off 0.94 (0.82-1.02) on ResNet-50 and 0.95 on
# ResNet-18. A/B: kernels.rnpair.DIRECT_AHEAD=0
DIRECT_AHEAD = 16
# The Winograd pairs' weight prefetch (issue 11, session 16; docs/numba.md, "The weights' prefetch in the Winograd
# products"): > 0, the batched products of the F(4x4) and F(2x2) pairs on ftile's cols tiles (the 128@28 layers' sides
# of 24-25 tiles, the 256@14 layers' channel halves: each side's panels from L3 or memory at their first tile)
# prefetch their weights' row k + WINO_AHEAD into L1 at step k (ftile.batched_gemms' ``ahead``); the rows tiles (the
# 64@56 layers) keep theirs. Read when a layer binds, as DIRECT_AHEAD: the half is the compiled half of both values
# (half_address(ahead, wino)). The same values either way. 0: off. Per kind on the Xeon (benchmarks/wino16_round.sh,
# nodes_ab2t.py, three processes beside other jobs) the touched layers 1.08-1.25x faster (their two threads at
# 0.52-0.61 of one thread's time against 0.58-0.76), the Conv sums 1.02-1.06; in turns (beside other jobs) default / it
# with ROWS_X_AHEAD 1.03 (ResNet-50) and 1.00 (ResNet-18), loaded 1.01 and 0.91. On (16) since the lead's call L2
# (docs/benchmarks.md, "Round 16"; alone on CPUs 0,1, 7 rounds): default / it ResNet-50 1.08 (0.79-1.26), ResNet-18
# 1.01 (0.78-1.32), against ORT 2t 1.20 and 1.19 where the default read 1.26 and 1.31; the models it does not touch
# 1.02 (MobileNetV2) and 1.06 (transformer); loaded (3 rounds) 1.36 and 1.11, MobileNetV2 1.00.
# A/B: kernels.rnpair.WINO_AHEAD=0
WINO_AHEAD = 16
# fdirect's zero-padded input filled by both sides (issue 11, session 16; docs/numba.md, "ResNet-50's pairs per kind
# of layer"): the direct pairs' pad (fdirect.pad_planes, ResNet-50's 3x3/2 layers: 1.6 MB at 128@56) was the caller's
# alone before it published the job, the helper idle meanwhile. With this on, the pad is PAD_UNITS units of input
# channels that both sides claim from one word at the start of their halves (pairs.claim_ends: the caller from the
# front, the helper from the back), each side then waiting until every unit is done (pairs.wait_count: at most the
# one unit the other side holds; a helper that never came claimed none). The padded input is the same whoever fills
# which channels, so the output is the one-thread path's bit for bit. Read when a layer binds. False: the caller pads.
PAD_SPLIT = False
PAD_UNITS = 8
# F(2x2)'s input transform done once for both sides (issue 11, session 16; same section): a wino2_pair's sides (by
# output channels: ResNet-50's five 256@14 layers) each transformed every tile's input (v, 16 x C x tiles: 0.8 MB at
# 256@14) before their weight panels. With this on, the sides transform PAD_UNITS units of input channels into the
# caller's v, claimed from one word as PAD_SPLIT's pad, wait until every unit is done, then both run their panels'
# products from that v. The transform's floats do not depend on who makes them, so the output is the two-sided
# transform's bit for bit. Read when a layer binds. False: each side its own transform.
WINO2_SHARED = False
# fdirect's pairs cut by output rows (issue 11, session 18; docs/numba.md, "ResNet-50's strided 3x3 layers at two
# threads cut by rows"): a direct pair (ResNet-50's 3x3/2 layers to 28x28 and 14x14, ResNet-18's) was cut panel-major
# (direct_cut: one side the first panels, the other the rest, every output row on both), so each side read the whole
# padded input, which the caller made alone before the job (pad_input: 1.66 MB at 128@56), the helper reading it from
# the caller's cache. With this on, a layer of an even number of output rows, at least DIRECT_ROWS_MIN_OH, is cut into
# two blocks of rows: each side runs every panel on its block (the one-thread driver's shards, one at a time), after
# padding only the input rows its block reads (fdirect.pad_rows) into a padded buffer of its own: no pad before the
# job, no barrier, no padded line read on the other core. Each shard is the one-thread driver's, so the output is the
# one-thread path's bit for bit. Read when a layer binds; FOLLOW_DIRECT and TAIL_DIRECT then do not apply. False: the
# panel-major cut. A/B: kernels.rnpair.DIRECT_ROWS=1
DIRECT_ROWS = False
DIRECT_ROWS_MIN_OH = 14

OP_WINO, OP_DIRECT, OP_WINO2 = 0, 1, 2
# desc: the half's address, the op, the per-call addresses (x, y, z), has_z, the float values (lo, hi,
# p0, p1), the weights (packed panels) and their length, zeros, bias, the shapes, then SIDE_N words a side
(FN, OP, XA, YA, ZA, HAS_Z, FV, WP, WP_N, ZEROS, BIAS, C, H, W, M, OH, OW, PH, PW, TH, TW, CODE, COLS, KC, LV,
 LM, XP, XP_N, KOFF, K, ROWSTEP, RB, STEP, PANELS, WIDTH,
 # chunks claimed as the sides go (DYNAMIC): the claim word (cpair's layout: the caller's next chunk in the low 32
 # bits, the end of the chunks left in the high ones; written per call) and the chunks (0: each side its [T0, T1))
 CLAIM, DYN) = range(37)
SIDE0, SIDE_N = 38, 8
# a side: its first and end tile (shard), its blocks, its v, products and scratch buffers (per call), the
# scratch's floats
S_T0, S_T1, S_BLOCKS, S_V, S_MO, S_SCR, S_SCR_N, S_XP = range(8)  # S_XP: DIRECT_ROWS' padded buffer of the side
# TAIL_DIRECT (fdirect's middle shards claimed one at a time), after the sides: the claim word (written per call,
# cpair's layout), the middle's shards (0: no tail) and its first shard
T_CLAIM, T_N, T_START = SIDE0 + 2 * SIDE_N, SIDE0 + 2 * SIDE_N + 1, SIDE0 + 2 * SIDE_N + 2
# A first phase that both sides share, after the tail's (PAD_SPLIT: fdirect's padded input; WINO2_SHARED: F(2x2)'s
# input transform): the claim word and the units done (written per call), the units (0: none), the padded planes'
# rows and columns (PAD_SPLIT)
P_CLAIM, P_DONE, P_N, P_HP, P_WP = range(SIDE0 + 2 * SIDE_N + 3, SIDE0 + 2 * SIDE_N + 8)
# DIRECT_ROWS: the kernel's rows (0: the panel-major cut; the sides' [T0, T1) then blocks of output rows, of RB)
R_KH = SIDE0 + 2 * SIDE_N + 8
NDESC = SIDE0 + 2 * SIDE_N + 9


def _build(ahead: int = 0, wino: int = 0):
    """The compiled ``half(desc_address, side) -> 0`` (side 0 the caller's, 1 the helper's): a closure
    over winograd's tile transforms, ftile's batched products (kind 2, rows and both cols tiles, the cols
    tiles' weights prefetched ``wino`` steps on: WINO_AHEAD's value where the pair was bound) and
    fdirect's drivers (3 x 7 tiles, strides 1 and 2, their weights prefetched ``ahead`` steps on:
    DIRECT_AHEAD's value), cached on disk by name."""
    bat0, bat1, bat2 = (ftile._batched(KIND, c, wino if c else 0) for c in (0, 1, 2))
    drv1, drv2 = (fdirect.driver_ahead(s, 3, fdirect.MP, ahead) for s in (1, 2))
    tin, tout = winograd._input_tiles4, winograd._output_tiles4
    tin2, tout2 = winograd._input_transform, winograd._output_transform
    pad, pad_rows = fdirect.pad_planes, fdirect.pad_rows
    f32 = np.float32

    def half(addr, side):
        d = numba.carray(_ptr(addr), (NDESC,), np.int64)
        b = SIDE0 + side * SIDE_N
        fv = numba.carray(_ptr(d[FV]), (4,), f32)
        has_z = d[HAS_Z] != 0
        no = d[HAS_Z] < 0  # False, typed as a value (not a literal)
        zero = d[OP] * 0
        t0, t1 = d[b + S_T0], d[b + S_T1]
        scratch = numba.carray(_ptr(d[b + S_SCR]), (d[b + S_SCR_N],), f32)
        m_n = d[M]
        if d[OP] == OP_DIRECT:
            k_n, oh_n, ow_n = d[K], d[OH], d[OW]
            xp = numba.carray(_ptr(d[XP]), (d[XP_N],), f32)
            koff = numba.carray(_ptr(d[KOFF]), (k_n,), np.int64)
            wp = numba.carray(_ptr(d[WP]), (d[WP_N],), f32)
            bias = numba.carray(_ptr(d[BIAS]), (m_n,), f32)
            out = numba.carray(_ptr(d[YA]), (m_n * oh_n * ow_n,), f32)
            z = numba.carray(_ptr(d[ZA] if has_z else d[YA]), (m_n * oh_n * ow_n,), f32)
            if d[R_KH] > 0:  # DIRECT_ROWS: the side's blocks of rows [t0, t1), every panel, its own padded rows
                rb, st = d[RB], d[STEP]
                h0, h1 = t0 * oh_n // rb, t1 * oh_n // rb
                if h1 > h0:
                    xs = numba.carray(_ptr(d[b + S_XP]), (d[XP_N],), f32)
                    xu = numba.carray(_ptr(d[XA]), (d[C], d[H], d[W]), f32)
                    pad_rows(xu, xs, d[PH], d[PW], d[P_HP], d[P_WP], h0 * st, (h1 - 1) * st + d[R_KH])
                    for blk in range(t0, t1):
                        for p in range(d[PANELS]):
                            s = p * rb + blk
                            if st == 1:
                                drv1(wp, k_n, m_n, xs, koff, d[ROWSTEP], ow_n, oh_n, rb, bias, z, has_z, fv[0], fv[1],
                                     out, d[KC], scratch, s, s + 1)
                            else:
                                drv2(wp, k_n, m_n, xs, koff, d[ROWSTEP], ow_n, oh_n, rb, bias, z, has_z, fv[0], fv[1],
                                     out, d[KC], scratch, s, s + 1)
                return 0
            if d[P_N] > 0:  # PAD_SPLIT: the padded input's channel units claimed by both sides, then all done
                c_n, units = d[C], d[P_N]
                xu = numba.carray(_ptr(d[XA]), (c_n, d[H], d[W]), f32)
                while True:
                    u = claim_ends(d, P_CLAIM, side)
                    if u < 0:
                        break
                    pad(xu, xp, d[PH], d[PW], d[P_HP], d[P_WP], u * c_n // units, (u + 1) * c_n // units)
                    count_up(d, P_DONE)
                wait_count(d, P_DONE, units)
            while True:  # the side's bulk [t0, t1), then (TAIL_DIRECT) the middle's shards claimed one at a time
                if t1 > t0:
                    if d[STEP] == 1:
                        drv1(wp, k_n, m_n, xp, koff, d[ROWSTEP], ow_n, oh_n, d[RB], bias, z, has_z, fv[0], fv[1], out,
                             d[KC], scratch, t0, t1)
                    else:
                        drv2(wp, k_n, m_n, xp, koff, d[ROWSTEP], ow_n, oh_n, d[RB], bias, z, has_z, fv[0], fv[1], out,
                             d[KC], scratch, t0, t1)
                if d[T_N] <= 0:
                    break
                u = claim_ends(d, T_CLAIM, side)
                if u < 0:
                    break
                t0 = d[T_START] + u
                t1 = t0 + 1
            return 0
        c_n, oh_n, ow_n, th_n, tw_n = d[C], d[OH], d[OW], d[TH], d[TW]
        x = numba.carray(_ptr(d[XA]), (c_n, d[H], d[W]), f32)
        y = numba.carray(_ptr(d[YA]), (m_n, oh_n, ow_n), f32)
        z = numba.carray(_ptr(d[ZA] if has_z else d[YA]), (m_n, oh_n, ow_n), f32)
        lv, lm = d[LV], d[LM]
        zeros = numba.carray(_ptr(d[ZEROS]), (m_n,), f32)
        bias = numba.carray(_ptr(d[BIAS]), (m_n,), f32)
        if d[OP] == OP_WINO2:  # every tile's input transform (each side its own; WINO2_SHARED: once), its panels
            nt = th_n * tw_n  # [t0, t1) at every position and their channels' output transform
            mo = numba.carray(_ptr(d[b + S_MO]), (16, lm), f32)
            wp = numba.carray(_ptr(d[WP]), (16, d[WP_N] // 16), f32)
            if d[P_N] > 0:  # WINO2_SHARED: the caller's v, its channel units transformed by both sides, then all done
                v = numba.carray(_ptr(d[SIDE0 + S_V]), (16, lv), f32)
                units = d[P_N]
                while True:
                    u = claim_ends(d, P_CLAIM, side)
                    if u < 0:
                        break
                    tin2(x, v, d[PH], d[PW], th_n, tw_n, u * c_n // units, (u + 1) * c_n // units)
                    count_up(d, P_DONE)
                wait_count(d, P_DONE, units)
            else:
                v = numba.carray(_ptr(d[b + S_V]), (16, lv), f32)
                tin2(x, v, d[PH], d[PW], th_n, tw_n, 0, c_n)
            groups = -d[PANELS]
            if d[COLS] == 0:
                bat0(wp, m_n, c_n, v, nt, mo, zeros, groups, no, zero, d[KC], scratch, t0 * 16, t1 * 16)
            elif d[COLS] == 2:
                bat2(wp, m_n, c_n, v, nt, mo, zeros, groups, no, zero, d[KC], scratch, t0 * 16, t1 * 16)
            else:
                bat1(wp, m_n, c_n, v, nt, mo, zeros, groups, no, zero, d[KC], scratch, t0 * 16, t1 * 16)
            tout2(mo, y, bias, z, has_z, th_n, tw_n, d[CODE], fv[2], fv[3], t0 * d[WIDTH], min(m_n, t1 * d[WIDTH]))
            return 0
        v = numba.carray(_ptr(d[b + S_V]), (36, lv), f32)
        mo = numba.carray(_ptr(d[b + S_MO]), (36, lm), f32)
        wp = numba.carray(_ptr(d[WP]), (36, d[WP_N] // 36), f32)
        blocks, dyn, nt = d[b + S_BLOCKS], d[DYN], th_n * tw_n
        if d[PANELS] > 0:  # BY_M_TILES: every tile (each side its own input transform), the side's panels [t0, t1)
            groups, m0, m1 = -d[PANELS], t0 * d[WIDTH], min(m_n, t1 * d[WIDTH])
            for i in range(blocks):
                b0, b1 = i * nt // blocks, (i + 1) * nt // blocks
                nl = b1 - b0
                tin(x, v, d[PH], d[PW], th_n, tw_n, b0, b1, 0, c_n)
                if d[COLS] == 0:
                    bat0(wp, m_n, c_n, v, nl, mo, zeros, groups, no, zero, d[KC], scratch, t0 * 36, t1 * 36)
                elif (nl + 7) // 8 * 8 < (nl + 6) // 7 * 7:
                    bat2(wp, m_n, c_n, v, nl, mo, zeros, groups, no, zero, d[KC], scratch, t0 * 36, t1 * 36)
                else:
                    bat1(wp, m_n, c_n, v, nl, mo, zeros, groups, no, zero, d[KC], scratch, t0 * 36, t1 * 36)
                tout(mo, y, bias, z, has_z, th_n, tw_n, d[CODE], fv[2], fv[3], b0, b1, m0, m1)
            return 0
        i = 0
        while True:
            if dyn > 0:  # the next chunk claimed (the caller from the front, the helper from the back)
                k = claim_ends(d, CLAIM, side)
                if k < 0:
                    break
                b0, b1 = k * nt // dyn, (k + 1) * nt // dyn
            else:
                if i >= blocks:
                    break
                b0 = t0 + i * (t1 - t0) // blocks
                b1 = t0 + (i + 1) * (t1 - t0) // blocks
                i += 1
            nl = b1 - b0
            tin(x, v, d[PH], d[PW], th_n, tw_n, b0, b1, 0, c_n)
            if d[COLS] == 0:
                bat0(wp, m_n, c_n, v, nl, mo, zeros, 1, no, zero, d[KC], scratch, 0, 36)
            elif (nl + 7) // 8 * 8 < (nl + 6) // 7 * 7:  # ftile.cols_mode: the 8-pixel tiles
                bat2(wp, m_n, c_n, v, nl, mo, zeros, 1, no, zero, d[KC], scratch, 0, 36)
            else:
                bat1(wp, m_n, c_n, v, nl, mo, zeros, 1, no, zero, d[KC], scratch, 0, 36)
            tout(mo, y, bias, z, has_z, th_n, tw_n, d[CODE], fv[2], fv[3], b0, b1, 0, m_n)
        return 0

    key = f"rnpair.half.kind{KIND}" + (f".a{ahead}" if ahead else "") + (f".w{wino}" if wino else "")
    setattr(half, CLOSURE_KEY, key)
    return jit(half)


@functools.cache
def half_address(ahead: int = 0, wino: int = 0) -> int:
    """The C address of the compiled half whose direct tiles prefetch ``ahead`` steps on and whose Winograd
    products' cols tiles ``wino`` (compiled or loaded now), 0 where there is none."""
    return pairs.function_address(_build(ahead, wino))


@jit
def _addresses(desc, x, y, z, v0, mo0, s0, v1, mo1, s1) -> None:
    """The per-call addresses into ``desc`` and every claim word unclaimed (before a job is published)."""
    desc[XA] = np.int64(x.ctypes.data)
    desc[YA] = np.int64(y.ctypes.data)
    desc[ZA] = np.int64(z.ctypes.data)
    desc[SIDE0 + S_V] = np.int64(v0.ctypes.data)
    desc[SIDE0 + S_MO] = np.int64(mo0.ctypes.data)
    desc[SIDE0 + S_SCR] = np.int64(s0.ctypes.data)
    desc[SIDE0 + SIDE_N + S_V] = np.int64(v1.ctypes.data)
    desc[SIDE0 + SIDE_N + S_MO] = np.int64(mo1.ctypes.data)
    desc[SIDE0 + SIDE_N + S_SCR] = np.int64(s1.ctypes.data)
    if desc[DYN] > 0:
        desc[CLAIM] = desc[DYN] << 32  # every chunk unclaimed (stored before fpair publishes the job)
    if desc[T_N] > 0:
        desc[T_CLAIM] = desc[T_N] << 32  # TAIL_DIRECT: every middle shard unclaimed
    if desc[P_N] > 0:
        desc[P_CLAIM] = desc[P_N] << 32  # PAD_SPLIT: every unit of the pad unclaimed, none done
        desc[P_DONE] = 0


@jit
def pair_run(ctl, desc, x, y, z, v0, mo0, s0, v1, mo1, s1, alone) -> int:
    """One layer: the per-call addresses into ``desc``, then fpair's job (publish, side 0, claim side 1
    or wait for the helper's) once it holds the callers' slot; ``alone``: both sides on the caller, no
    job. 1 the helper ran the second half, 2 the caller ran both, 3 another caller holds the slot."""
    if not alone and not _cas(ctl, SLOT, 0, 1):
        return 3
    _addresses(desc, x, y, z, v0, mo0, s0, v1, mo1, s1)
    if alone:
        addr = np.int64(desc.ctypes.data)
        _call2(desc[FN], addr, 0)
        _call2(desc[FN], addr, 1)
        return 2
    return fpair.pair_job(ctl, desc)


@jit
def side_run(desc, side) -> int:
    """Side ``side`` of the layer whose addresses ``desc`` holds (``_addresses``): a shard of the pool's job
    (BESIDE_POOL)."""
    return _call2(desc[FN], np.int64(desc.ctypes.data), side)


_ready: dict = {}  # (DIRECT_AHEAD's value, WINO_AHEAD's) -> [the half's address] once made ready
_ready_lock = threading.Lock()


def _warm() -> None:
    """The caller's side compiled through a stand-in call that finds the slot held."""
    held = np.zeros(8, np.int64)
    held[SLOT] = 1
    s = np.zeros(1, np.float32)
    pair_run(held, np.zeros(NDESC, np.int64), s, s, s, s, s, s, s, s, s, False)


def prepare(ahead: int = 0, wino: int = 0) -> int:
    """Compile (or load) fpair's sides, this module's half (its direct tiles prefetching ``ahead`` steps on, its
    Winograd products' cols tiles ``wino``) and its caller on the calling thread (fpair.prepare_family): the half's
    address, 0 where there is no pair."""
    with _ready_lock:
        ready = _ready.setdefault((int(ahead), int(wino)), [])
    return fpair.prepare_family(ready, _ready_lock, functools.partial(half_address, int(ahead), int(wino)), _warm)


def enabled() -> bool:
    """Whether these pairs may be made now: ``ON``, cpair's conditions (x86-64, spinning threads, the
    switch, the AVX-512 tiles) and a cycle counter."""
    return ON and cpair.enabled() and pairs.cycle_rate() > 0


class Pair:
    """One bound layer's pair: its descriptor, the arrays it points to, the sides' buffer sizes."""

    __slots__ = ("desc", "keep", "sizes", "prep", "bound", "balance", "direct", "ahead", "wino", "bias")

    def __init__(self, desc, sizes, prep):
        self.desc, self.sizes, self.prep = desc, sizes, prep
        self.ahead = int(DIRECT_AHEAD)  # the half's direct prefetch (DIRECT_AHEAD at bind)
        self.wino = int(WINO_AHEAD)  # its Winograd products' (WINO_AHEAD at bind)
        self.keep: tuple = ()
        self.bound = None  # the weight the descriptor's packed panels come from
        self.bias = None  # the bias whose address the descriptor holds (written when another comes: ~1 us a call)
        # BALANCE (an F(4x4) layer's moving cut): [the smoothed cut, its least, its most, the tiles, C, M]
        self.balance: list | None = None
        self.direct: list | None = None  # FOLLOW_DIRECT (fdirect's shards): [the cut (float), least, most, shards]

    def __call__(self, w, bias, x, y, z, serial=None, pad_input=None) -> bool:
        """The layer in two halves (or both on the caller where the helper does not spin: it is woken; with
        ALONE_SERIAL, ``serial()`` instead where given: the one-thread session's call, writing ``y``; else
        ``pad_input()`` first where given: fdirect's padded input);
        where the pool's worker spins or another caller holds the slot, the halves as the pool's two shards
        (BESIDE_POOL); False where nothing was done (no compiled half; with BESIDE_POOL off, the worker spinning or
        another caller in the slot): the caller takes the general path. ``x``, ``y``, ``z``: one image (3-D)."""
        if not self.desc[FN]:
            address = prepare(self.ahead, self.wino)
            if not address:
                return False
            self.desc[FN] = address
        pooled = shards.POOL.workers_spinning()
        if pooled and not BESIDE_POOL:
            return False
        srv = None if pooled else fpair.server()
        if srv is not None and not srv.ready and not srv.prepare():
            return False
        alone = srv is not None and not srv.usable()
        if alone:
            srv.asleep()
            if ALONE_SERIAL and serial is not None:
                serial()
                return True
        if pad_input is not None:
            pad_input()
        if w is not self.bound:
            self.keep = self.prep(self.desc, w, bias)
            self.bound = w
        if bias is not self.bias:
            self.desc[BIAS] = bias.ctypes.data
            self.bias = bias
        (v0, m0, s0), (v1, m1, s1) = self.sizes
        side0 = (config.thread_buffer("wino_v", v0, np.float32), config.thread_buffer("wino_mo", m0, np.float32),
                 config.thread_buffer("ftile", s0, np.float32))
        zz = y if z is None else z
        if not pooled:
            done = pair_run(srv.ctl, self.desc, x, y, zz, *side0, *_side1_buffers(alone, v1, m1, s1), alone)
            if done != 3:
                if not alone:
                    before = srv.stats["backoffs"]
                    srv.result(done, *rule(chunk_stall(srv, self.desc) if done == 1 else None))
                    follow(srv, before)
                    if done == 1 and self.balance is not None:
                        rebalance(self, srv.ctl)
                    elif done == 1 and FOLLOW_DIRECT and self.direct is not None:
                        follow_direct(self, srv.ctl)
                return True
            if not BESIDE_POOL:
                return False
        # the pool's worker spins (a model with pooled nodes), or another caller (another session's layer: a step's
        # own runs take its lock) holds the pair's slot: the halves as the pool's job of two shards, side 1 in the
        # caller's own buffers (the caller waits for the job); the pair's bits whoever runs them (BESIDE_POOL)
        desc = self.desc
        _addresses(desc, x, y, zz, *side0, *_side1_buffers(True, v1, m1, s1))
        shards.POOL.run(functools.partial(side_run, desc), 2, 2, stall_share=POOL_STALL_SHARE)
        return True


def _side1_buffers(alone: bool, v1: int, m1: int, s1: int) -> tuple:
    """Side 1's buffers (v, mo, scratch): the helper's, or where the caller runs both sides without the slot
    (``alone``: the helper not usable, which it may be while it still runs another caller's job in them) the
    caller's own (review17)."""
    if alone:
        return (config.thread_buffer("rnpair.solo_v", v1, np.float32),
                config.thread_buffer("rnpair.solo_mo", m1, np.float32),
                config.thread_buffer("rnpair.solo_scratch", s1, np.float32))
    return (fpair.helper_buffer("rnpair.v", v1), fpair.helper_buffer("rnpair.mo", m1),
            fpair.helper_buffer("rnpair.scratch", s1))


def follow_direct(pair: Pair, ctl) -> int:
    """FOLLOW_DIRECT: move a direct pair's cut (the caller's shards [0, cut)) by cpair.follow_step's rule; the cut."""
    cut, now = cpair.follow_step(pair.direct, ctl)
    if now != cut:
        set_direct_cut(pair, now)
    return now


def set_direct_cut(pair: Pair, cut: int) -> None:
    """A direct pair's halves at ``cut``: the caller's shards [0, cut), the helper's [cut, shards)."""
    d = pair.desc
    d[SIDE0 + S_T1] = d[SIDE0 + SIDE_N + S_T0] = cut


def rebalance(pair: Pair, ctl) -> int:
    """BALANCE: move ``pair``'s cut (an F(4x4) layer's static halves, the caller's tiles [0, cut)) toward the one at
    which the call just made would have ended on both sides at once, from its cycle stamps in ``ctl``; the cut now.
    A call whose helper started after the caller's half ended (a helper without its core) leaves it. FOLLOW: a clamped
    step from the sides' ends instead (its comment)."""
    bal, d = pair.balance, pair.desc
    nc = int(d[SIDE0 + S_T1])
    nt = bal[3]
    own, start = int(ctl[fpair.OWN]), int(ctl[pairs.CLAIMED_AT] - ctl[pairs.PUBLISHED])
    helper = int(ctl[pairs.FINISHED_AT] - ctl[pairs.CLAIMED_AT])
    if own <= 0 or helper <= 0 or start < 0 or start >= own:
        return nc
    if FOLLOW:  # (bal's first four words are cpair.follow_step's state: the cut, its least, its most, the tiles)
        was = bal[0]
        cpair.follow_step(bal, ctl, FOLLOW_GAIN, FOLLOW_STEP)
        if bal[0] == was:  # within one tile's time
            return nc
    else:
        rc, rh = own / nc, helper / (nt - nc)  # cycles a tile on each side
        bal[0] += BALANCE_GAIN * ((start + nt * rh) / (rc + rh) - bal[0])
    cut = min(max(int(round(bal[0])), bal[1]), bal[2])
    if cut != nc:
        set_cut(d, cut, nt, bal[4], bal[5])
    return cut


def set_cut(d, cut: int, nt: int, c_n: int, m_n: int) -> None:
    """An F(4x4) descriptor's halves at ``cut`` (the caller's tiles [0, cut), the helper's [cut, nt)), each side in
    winograd.tile_blocks' blocks (the sides' buffers sized for it: wino_pair)."""
    for side, (t0, t1) in enumerate(((0, cut), (cut, nt))):
        base = SIDE0 + side * SIDE_N
        d[base + S_T0], d[base + S_T1] = t0, t1
        d[base + S_BLOCKS] = winograd.tile_blocks(t1 - t0, c_n, m_n, budget=PAIR_TILE_BYTES)


def rule(stalled: bool | None = None) -> tuple:
    """The stall rule of these pairs, as pairs.PairServer.result's arguments after ``done``: fpair's slack
    (not strict), HICCUP_S, the caller's own verdict ``stalled`` (None: a wait past STALL_S plus STALL_SLACK of
    the caller's own half), HICCUPS, HICCUP_BACKOFF_S, STALL_SKIP and STALL_NET (cpair's pairs of the parallel
    one-image layers keep it as their ``rule``: read when they are bound)."""
    return False, HICCUP_S, stalled, HICCUPS, HICCUP_BACKOFF_S, STALL_SLACK, STALL_SKIP, STALL_NET


def chunk_stall(srv, desc) -> bool | None:
    """Whether the paired call just made on ``desc`` stalled, where its tiles were claimed in chunks (DYN):
    the caller waits for one chunk of the helper's at most, so only a wait past STALL_S plus one of the
    caller's own chunks (its own time over the chunks it ran) is a helper that lost its core; None for the
    static halves (the server's own rule)."""
    if desc[DYN] <= 0:
        return None
    ctl = srv.ctl
    mine = int(desc[CLAIM]) & 0xFFFFFFFF  # the chunks the caller ran (from the front)
    return bool(ctl[pairs.WAITED] > srv.stall + ctl[fpair.OWN] // max(mine, 1))


def follow(srv, before: int) -> None:
    """Back the shard pool off where the pairs' helper ``srv`` backed off since its count was ``before``
    (POOL_BACKOFF), for as long as the pairs' where that was of a fixed length (pairs.HICCUP_BACKOFF_S)."""
    if POOL_BACKOFF and srv.stats["backoffs"] > before:
        why = "the ResNet pairs backed off (rnpair.POOL_BACKOFF)"
        if srv.fixed:
            shards.POOL._back_off(why, srv.fixed)
        else:
            shards.POOL._back_off(why)


def wino_pair(conv, x_shape, y_shape, ph: int, pw: int, code: int, p0, p1, has_z: bool):
    """The pair of a bound 3x3 stride-1 (pads 1) layer of one image as F(4x4, 3x3) by tiles, or None."""
    n_n, c_n = x_shape[:2]
    m_n, oh_n, ow_n = y_shape[1:]
    if not (ON and WINO and n_n == 1 and oh_n * ow_n >= WINO4_MIN_PIXELS and enabled()):
        return None
    if m_n % ftile.COLS_LANES[KIND] and m_n % ftile.MR[KIND]:
        return None
    th_n, tw_n = (oh_n + 3) // 4, (ow_n + 3) // 4
    nt = th_n * tw_n
    if nt < 2:
        return None
    from .conv import ftile_cols

    cols = ftile_cols(KIND, m_n, nt, c_n)
    width = ftile.COLS_WIDTH[KIND] if cols else ftile.MR[KIND]
    cut = -(-nt // 2)
    desc = _wino_desc(OP_WINO, x_shape, y_shape, ph, pw, th_n, tw_n, code, cols, has_z)
    if nt <= BY_M_TILES and -(-m_n // width) >= 2:
        return _by_m_pair(conv, desc, c_n, m_n, nt, width, p0, p1)
    sizes = []
    most = 0
    for side, (t0, t1) in enumerate(((0, cut), (cut, nt))):
        blocks = winograd.tile_blocks(t1 - t0, c_n, m_n, budget=PAIR_TILE_BYTES)
        nl = -(-(t1 - t0) // blocks)
        most = max(most, nl)
        base = SIDE0 + side * SIDE_N
        desc[base + S_T0], desc[base + S_T1], desc[base + S_BLOCKS] = t0, t1, blocks
    chunks = dyn_chunks(nt, most)
    balance = None
    if chunks:
        desc[DYN] = chunks
        most = -(-nt // chunks)
    elif BALANCE:
        lo = max(1, int(nt * (0.5 - BALANCE_RANGE)))
        hi = max(min(nt - 1, nt - lo), cut)
        balance = [float(cut), lo, hi, nt, c_n, m_n]
        for n in range(nt - hi, hi + 1):  # the largest block of a side of n tiles, for every cut in range
            most = max(most, -(-n // winograd.tile_blocks(n, c_n, m_n, budget=PAIR_TILE_BYTES)))
    lv, lm = winograd._spaced(c_n * most), winograd._spaced(m_n * most)
    desc[LV], desc[LM] = lv, lm
    ssize = max(ftile.scratch_size(KIND, 2 if cols else 0, most), ftile.scratch_size(KIND, 1, most)) if cols else 1
    for side in range(2):
        desc[SIDE0 + side * SIDE_N + S_SCR_N] = ssize
        sizes.append((36 * lv, 36 * lm, ssize))
    pair = _wino_pair(conv, desc, sizes, m_n, c_n, width, 4, p0, p1)
    pair.balance = balance
    return pair


def _panel_cut(m_n: int, width: int) -> int:
    """The caller's whole ``width``-channel panels of ``m_n`` channels, so that the sides' channels are as even as
    whole panels allow."""
    panels = -(-m_n // width)
    return min(range(1, panels), key=lambda q: max(min(m_n, q * width), m_n - min(m_n, q * width)))


def _by_m_pair(conv, desc, c_n: int, m_n: int, nt: int, width: int, p0, p1) -> Pair:
    """An F(4x4) layer's pair by output channels (BY_M_TILES): each side every tile in winograd.tile_blocks' blocks
    (the one-thread path's), its whole panels of the weights."""
    panels = -(-m_n // width)
    cut = _panel_cut(m_n, width)
    blocks = winograd.tile_blocks(nt, c_n, m_n, budget=PAIR_TILE_BYTES)
    most = -(-nt // blocks)
    desc[PANELS], desc[WIDTH] = panels, width
    lv, lm = winograd._spaced(c_n * most), winograd._spaced(m_n * most)
    desc[LV], desc[LM] = lv, lm
    ssize = max(ftile.scratch_size(KIND, 2, most), ftile.scratch_size(KIND, 1, most)) if desc[COLS] else 1
    for side, (q0, q1) in enumerate(((0, cut), (cut, panels))):
        base = SIDE0 + side * SIDE_N
        desc[base + S_T0], desc[base + S_T1], desc[base + S_BLOCKS], desc[base + S_SCR_N] = q0, q1, blocks, ssize
    return _wino_pair(conv, desc, [(36 * lv, 36 * lm, ssize)] * 2, m_n, c_n, width, 4, p0, p1)


def dyn_chunks(nt: int, most: int) -> int:
    """The chunks of ``nt`` F(4x4) tiles that DYNAMIC claims (DYN_CHUNKS, fewer where a chunk would have under
    DYN_MIN_TILES tiles or more than ``most``, the static halves' largest block), 0: static halves."""
    if not DYNAMIC:
        return 0
    n = max(min(DYN_CHUNKS, nt // max(DYN_MIN_TILES, 1)), -(-nt // max(most, 1)))
    return n if n >= 2 else 0


def _wino_desc(op: int, x_shape, y_shape, ph: int, pw: int, th_n: int, tw_n: int, code: int, cols: int,
               has_z: bool):
    """A Winograd pair's descriptor with what both kinds hold: the op, the shapes, pads and tiles, the
    epilogue and the products' K chunk (the sides' parts, buffers and weights are the caller's)."""
    _n, c_n, h_n, w_n = x_shape
    m_n, oh_n, ow_n = y_shape[1:]
    desc = np.zeros(NDESC, np.int64)
    desc[OP], desc[HAS_Z] = op, int(has_z)
    desc[C], desc[H], desc[W], desc[M], desc[OH], desc[OW] = c_n, h_n, w_n, m_n, oh_n, ow_n
    desc[PH], desc[PW], desc[TH], desc[TW], desc[CODE], desc[COLS] = ph, pw, th_n, tw_n, code, int(cols)
    desc[KC] = ftile.COLS_KC if cols else -(-c_n // -(-c_n // ftile.KC))
    return desc


def _wino_pair(conv, desc, sizes, m_n: int, c_n: int, width: int, tile: int, p0, p1) -> Pair:
    """A Winograd pair on ``desc``: its float values (the epilogue's p0, p1), zeros and ``prep`` (the
    weights transformed for F(tile x tile, 3x3) (conv's cache) and packed in ``width``-row panels a
    position, their address in the descriptor)."""
    positions = (tile + 2) ** 2
    fv = np.array([0, 0, p0, p1], np.float32)
    zeros = conv._zeros(m_n, np.float32)
    desc[FV], desc[ZEROS] = fv.ctypes.data, zeros.ctypes.data

    def prep(d, w, bias):
        u = conv._transformed(w, np.asarray(w, np.float32).reshape(m_n, c_n, 3, 3), tile)
        wp = np.ascontiguousarray(ftile.pack_batched(u, width).reshape(positions, -1))
        d[WP], d[WP_N] = wp.ctypes.data, wp.size
        return wp, fv, zeros

    pair = Pair(desc, sizes, prep)
    pair.keep = (fv, zeros)
    return pair


def _shard_work(m_n: int, oh_n: int, rb: int, width: int) -> list[int]:
    """Channels x rows of each shard of fdirect's two-thread plan (panel-major: shard s is panel s // rb,
    row block s % rb; a last panel of 16 or 32 channels counts for what it has)."""
    return [min(width, m_n - (s // rb) * width) * ((s % rb + 1) * oh_n // rb - (s % rb) * oh_n // rb)
            for s in range(-(-m_n // width) * rb)]


def _direct_worst(m_n: int, oh_n: int, rb: int, width: int) -> int:
    """The larger side's channels x rows at ``direct_cut``'s cut."""
    work = _shard_work(m_n, oh_n, rb, width)
    part = sum(work[:direct_cut(m_n, oh_n, rb, width)])
    return max(part, sum(work) - part)


def wino2_pair(conv, x_shape, y_shape, ph: int, pw: int, code: int, p0, p1, has_z: bool):
    """The pair of a bound 3x3 stride-1 layer of one image as F(2x2, 3x3) by output channels (conv.py's
    fused shards: a side's weight panels at every position, then their channels' output transform; each
    side transforms every tile's input itself: no barrier), or None."""
    n_n, c_n = x_shape[:2]
    m_n, oh_n, ow_n = y_shape[1:]
    if not (ON and WINO2 and n_n == 1 and enabled()):
        return None
    th_n, tw_n = (oh_n + 1) // 2, (ow_n + 1) // 2
    nt = th_n * tw_n
    from .conv import ftile_cols

    cols = ftile.cols_mode(KIND, nt) if ftile_cols(KIND, m_n, nt, c_n) else 0
    width = ftile.COLS_WIDTH[KIND] if cols else ftile.MR[KIND]
    panels = -(-m_n // width)
    if panels < 2:
        return None
    cut = _panel_cut(m_n, width)
    desc = _wino_desc(OP_WINO2, x_shape, y_shape, ph, pw, th_n, tw_n, code, cols, has_z)
    desc[PANELS], desc[WIDTH] = panels, width
    lv, lm = winograd._spaced(c_n * nt), winograd._spaced(m_n * nt)
    desc[LV], desc[LM] = lv, lm
    ssize = ftile.scratch_size(KIND, cols, nt)
    for side, (q0, q1) in enumerate(((0, cut), (cut, panels))):
        base = SIDE0 + side * SIDE_N
        desc[base + S_T0], desc[base + S_T1], desc[base + S_BLOCKS], desc[base + S_SCR_N] = q0, q1, 1, ssize
    v1 = 16 * lv
    if WINO2_SHARED:  # the input transform made once, in the caller's v (the helper's v then unused)
        desc[P_N] = max(1, min(int(PAD_UNITS), c_n))
        v1 = 1
    return _wino_pair(conv, desc, ((16 * lv, 16 * lm, ssize), (v1, 16 * lm, ssize)), m_n, c_n, width, 2, p0, p1)


def direct_cut(m_n: int, oh_n: int, rb: int, width: int) -> int:
    """The caller's shards (panel-major: shard s is panel s // rb, row block s % rb) of fdirect's
    two-thread plan, so that both sides get about the same channels x rows (a last panel of 16 or 32
    channels counts for what it has: 512 channels are 10 panels of 48 and one of 32)."""
    work = _shard_work(m_n, oh_n, rb, width)
    best, cut, run = None, 1, 0
    whole = sum(work)
    for s in range(1, len(work)):
        run += work[s - 1]
        worst = max(run, whole - run)
        if best is None or worst < best:
            best, cut = worst, s
    return cut


def direct_tail(total: int, cut: int) -> tuple[int, int] | None:
    """TAIL_DIRECT's middle of fdirect's ``total`` shards about the bound ``cut``: (a, b), the shards [a, b) claimed
    (cpair.TAIL_SHARE of them, at least two), each side's bulk at least one shard; None where there is no room."""
    mid = max(2, int(round(cpair.TAIL_SHARE * total)))
    a = max(1, cut - mid // 2)
    b = min(total - 1, a + mid)
    return (a, b) if b - a >= 2 else None


def direct_pair(conv, x_shape, y_shape, kernel: tuple, stride: int, ph: int, pw: int, lo, hi, has_z: bool):
    """The pair of a bound direct convolution (fdirect.py, 3 x 7 tiles) of one image, or None."""
    n_n, c_n = x_shape[:2]
    m_n, oh_n, ow_n = y_shape[1:]
    kh, kw = kernel
    if not (ON and DIRECT and n_n == 1 and stride in (1, 2) and enabled()):
        return None
    cv, mp = fdirect.tile_shape(m_n, ow_n)
    if (cv, mp) != (3, fdirect.MP):
        return None
    k_n = c_n * kh * kw
    total, rb, kc = fdirect.plan(m_n, k_n, oh_n, 2, cv)
    if total < 2:
        return None
    if rb * 2 <= oh_n and _direct_worst(m_n, oh_n, 2 * rb, 16 * cv) < 0.97 * _direct_worst(m_n, oh_n, rb, 16 * cv):
        rb *= 2  # a finer cut where the plan's leaves one side 3 %+ more (512@7: 272 channels against 240)
        total = -(-m_n // (16 * cv)) * rb
    hp, wpad, step, koff = fdirect.geometry(c_n, kh, kw, stride, oh_n, ow_n)
    koff = np.ascontiguousarray(koff)
    rows = DIRECT_ROWS and oh_n % 2 == 0 and oh_n >= max(2, int(DIRECT_ROWS_MIN_OH))
    if rows:  # two blocks of rows, each side one, every panel
        rb = 2
        total = -(-m_n // (16 * cv)) * rb
    xp = np.zeros(c_n * hp * wpad, np.float32)
    size = fdirect.scratch_size(k_n, kc, oh_n, ow_n, rb, cv, mp)
    cut = direct_cut(m_n, oh_n, rb, 16 * cv)
    desc = np.zeros(NDESC, np.int64)
    fv = np.array([lo, hi, 0, 0], np.float32)
    desc[OP], desc[HAS_Z], desc[FV], desc[M], desc[OH], desc[OW] = OP_DIRECT, int(has_z), fv.ctypes.data, m_n, oh_n, \
        ow_n
    desc[XP], desc[XP_N], desc[KOFF], desc[K], desc[ROWSTEP], desc[RB], desc[KC], desc[STEP] = \
        xp.ctypes.data, xp.size, koff.ctypes.data, k_n, step, rb, kc, stride
    bulk = ((0, cut), (cut, total))
    tail = direct_tail(total, cut) if TAIL_DIRECT and not rows else None
    own = ()
    if rows:  # each side's padded buffer (the rows it reads), the sides' blocks of rows
        own = (np.zeros(c_n * hp * wpad, np.float32), np.zeros(c_n * hp * wpad, np.float32))
        bulk = ((0, 1), (1, 2))
        desc[C], desc[H], desc[W], desc[PH], desc[PW] = c_n, x_shape[2], x_shape[3], ph, pw
        desc[P_HP], desc[P_WP], desc[PANELS], desc[R_KH] = hp, wpad, total // rb, kh
        for side in range(2):
            desc[SIDE0 + side * SIDE_N + S_XP] = own[side].ctypes.data
    if tail is not None:
        a, b = tail
        bulk = ((0, a), (b, total))
        desc[T_N], desc[T_START] = b - a, a
    for side, (t0, t1) in enumerate(bulk):
        base = SIDE0 + side * SIDE_N
        desc[base + S_T0], desc[base + S_T1], desc[base + S_BLOCKS], desc[base + S_SCR_N] = t0, t1, 1, size

    def prep(d, w, bias):
        from .conv_serial import _packed

        wp = np.ascontiguousarray(_packed(conv, w, k_n, 16 * cv), np.float32)
        d[WP], d[WP_N] = wp.ctypes.data, wp.size
        return wp, fv, xp, koff, *own

    pair_pad = None if rows else (xp, ph, pw, hp, wpad, c_n)
    if PAD_SPLIT and not rows:  # both sides fill the padded input (the halves' first phase), not the caller first
        desc[C], desc[H], desc[W], desc[PH], desc[PW] = c_n, x_shape[2], x_shape[3], ph, pw
        desc[P_N], desc[P_HP], desc[P_WP] = max(1, min(int(PAD_UNITS), c_n)), hp, wpad
        pair_pad = None
    pair = Pair(desc, ((1, 1, size), (1, 1, size)), prep)
    pair.keep = (fv, xp, koff, *own)
    span = cpair.FOLLOW_RANGE * total
    if tail is None and not rows:
        pair.direct = [float(cut), max(1, int(round(cut - span))), min(total - 1, int(round(cut + span))), total]
    return pair, pair_pad


__all__ = ["ALONE_SERIAL", "BALANCE", "BY_M_TILES", "DIRECT_ROWS", "DYNAMIC", "FOLLOW", "ON", "Pair", "chunk_stall",
           "direct_pair", "direct_tail", "dyn_chunks", "enabled", "follow", "follow_direct", "half_address", "pair_run",
           "prepare", "rebalance", "rule", "set_cut", "wino2_pair", "wino_pair"]
