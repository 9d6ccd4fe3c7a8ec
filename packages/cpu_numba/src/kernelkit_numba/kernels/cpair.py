"""float32 convolutions on two cores, handed over in compiled code: MobileNetV2's
1x1 and depthwise 3x3 layers as the calling thread's half and a spinning helper's (issue 11,
session 10; docs/numba.md, "MobileNetV2 on two cores, handed over in compiled code").

MobileNetV2's layers are 30-300 us each. The shard pool hands a job over in Python (20-60 us a job:
the GIL, a wake-up, the end wait), so at two threads they stayed on the calling thread (conv.py's
serial limits). Here the hand-over is fpair.py's, on its helper thread (the one for every float32
pair, issue 11, session 10, second round): a helper spinning in a ``nogil`` Numba loop on one int64
state word reaches this module's compiled ``half(desc_address, side)`` by address (the descriptor's
first word, ``FN``, as fgemm's halves), a per-node int64 descriptor holds the arrays' addresses
(rebuilt with ``numba.carray``), ``pair_run`` writes the per-call addresses and calls fpair's
``pair_job`` (publish, side 0, claim the second half by compare-and-swap where the helper did not
come, or wait), and the back-off rules are qpair's (``pairs.PairServer``: ``STALL_S`` without fpair's
slack, ``MISSES``, the pool's ``backed_off``; no pair while the pool's worker spins;
``KERNELKIT_NUMBA_SPIN_US=0`` turns pairs off).

**Sticky channel halves.** The caller always runs the lower output channels and the helper the
upper ones, in every layer of an inverted-residual block:

- the expansion 1x1 (ftile's rows or cols tiles): output channels ``[0, c)`` and ``[c, M)``, ``c`` a
  whole number of weight panels;
- the depthwise 3x3 (dwtile's planes): the same channel cut, so each core reads the half of its
  input that it has just written, from its own L2 (the cut of the layer that wrote the input is
  looked up by the input's name, ``_cuts``; else the same rule on the channel count);
- the projection 1x1: output channels where its panels split evenly, else output pixels (a
  projection of 24 channels is three 8-row panels); it reads both halves of its input once. Where
  ``K_SPLIT`` takes it (K >= 128 on at most 784 pixels: MobileNetV2's 14x14 and 28x28 ones, since
  session 17), each side computes every output over the input channels its core wrote instead, and
  the caller adds the two after the join.

Each half is one call of the one-thread driver over its part (rows tiles: a one-thread plan of the
part; cols tiles: a range of panels; depthwise: a range of planes), so a 1x1 result is the one-thread
path's, bit for bit (each output's sum runs over K in the same order whatever the part). Not so a K
cut's (its sums in another order) nor, in the last bits, the stride-1 depthwise halves' (session 17):
within the fp32 tolerances; a refused pair of either kind runs its own halves on the caller
(``K_SOLO``, ``DW_SOLO``), so that a two-thread output does not depend on whether the helper came.

Pairs are made only in a session of two threads or more, for layers above ``MIN_US`` of estimated
one-thread time, on the AVX-512 variants (ftile's kind 2 with 8-row panels and dwtile's tiles);
``KERNELKIT_F32_PAIR=off`` (read when a session binds its nodes) turns them off.

**A batch** (issue 11, session 11; ``BATCH``): at exactly two threads a batch pairs too, each side
looping over its images: image halves for an even batch (the caller the first images, the helper the
rest: each core reads what it wrote, whatever the layer), channel halves of every image for an odd
one (``BATCH_AXIS``); the stem is one hand-over an image. Such a layer's bound call is conv_serial's
pooled one where its work passes the serial limits: it takes the pool while the pool's worker spins
(a model with pooled layers), else the pair, else (the helper refused) the caller alone, so that a
model whose layers all pair never starts a pool worker (MobileNetV2 at batch 8: 1.76x onnxruntime's
two threads through the pool in session 10).
"""
from __future__ import annotations

import functools
import os
import threading

import numba
import numpy as np

from .. import config, shards
from .._spin import _cycles
from ..cache import CLOSURE_KEY
from ..config import jit
from . import dwtile, fpair, ftile, pairs
from .pairs import SLOT, STOP, X86, _cas, _ptr, cycle_rate

ENV = "KERNELKIT_F32_PAIR"
KIND = 2  # ftile's avx512 variant (8-row panels, 48-channel cols panels); dwtile's tiles need AVX-512 too
ROWS, COLS, DEPTHWISE, IMPLICIT = 0, 1, 2, 3  # the descriptor's OP
# desc: the half's address (fpair's helper calls it: every family's descriptor starts with it), the op,
# the per-call addresses (x, y, z, the two sides' scratch), the clamp, the layer's arrays and sizes,
# then SIDE_N words a side from SIDE0
(FN, OP, XA, YA, ZA, HAS_Z, SCR0, SCR1, FV, WA, WA_N, BIAS, ZEROS, K, M, L, KC,
 C, H, W, OH, OW, PH, PW, BAND, DWFN,
 # the implicit GEMM (a strided stem): its padded phases buffer and offset table; for whole images (a batch
 # by images: each side fills its own phases, in its scratch) the flag and the phases' geometry (C, H, W, PH
 # the input's)
 XPP, XPP_N, KOFF, IMGS, STRIDE, PL, HP, QP,
 # images claimed one at a time (DYNAMIC): the claim word (the caller's next image in the low 32 bits, the
 # end of the helper's images in the high ones; written per call) and the batch (0: each side its [N0, N1))
 CLAIM, DYN) = range(36)
# (a batch: each side loops over its images [S_N0, S_N1), the images' arrays one after another)
SIDE0, SIDE_N = 36, 12
# a side: its first output channel (or panel, plane), its channels (or the end panel, plane), its first
# pixel and pixels, the rows plan's block, groups, kc, pack and shards, its scratch floats, its images
(S_C0, S_MC, S_P0, S_NP, S_BLOCK, S_GROUPS, S_KC, S_PACK, S_TOTAL, S_SCR_N, S_N0, S_N1) = range(12)
# TAIL (a one-image 1x1 layer's middle units claimed one at a time), after the sides: the claim word (written per
# call: the caller's next unit in the low 32 bits, the end of those left in the high ones), the units (0: no tail),
# their kind (rows tiles by channels, by pixels, cols tiles), the middle's first channel (pixel; cols: panel), a
# unit's channels (pixels; cols: pieces of a panel), then a unit's one-thread plan on the rows tiles (block, groups,
# kc, pack, shards; cols: the tile's pixels) and its scratch floats (bind only)
(T_CLAIM, T_N, T_AXIS, T_START, T_STEP, T_BLOCK, T_GROUPS, T_KC, T_PACK, T_TOTAL, T_SCR) = range(SIDE0 + 2 * SIDE_N,
                                                                                               SIDE0 + 2 * SIDE_N + 11)
T_CHANNELS, T_PIXELS, T_COLS = 0, 1, 2
# SUB_SPLIT (a one-image 1x1 strided layer's subsampled input filled by both sides), after the tail's: the claim word
# and the units done (written per call), the units, the raw input's address (written per call: 0 where the caller
# copied the input itself), its planes' rows and columns and the strides (the subsampled planes: OH, OW); STEM_SPLIT
# (a stem's phases filled by both sides) the same words, U_H the bands of padded rows a channel (its geometry: C, H,
# W, STRIDE, PH, PL, HP, QP)
U_CLAIM, U_DONE, U_N, U_X, U_H, U_W, U_SH, U_SW = range(SIDE0 + 2 * SIDE_N + 11, SIDE0 + 2 * SIDE_N + 19)
# K_SPLIT (a one-image projection's K cut between the sides), after SUB_SPLIT's: the cut (0: none), side 1's packed
# weights (side 0's at WA) and the layer's buffer of side 1's partial sums (bind only)
KS_CUT, KS_W1, KS_PART = range(SIDE0 + 2 * SIDE_N + 19, SIDE0 + 2 * SIDE_N + 22)
# WARM (an expansion's halves pull their input (and residual) lines in one sequential pass first), after K_SPLIT's:
# WARM's bits where the pair takes it (0: none; bind only)
XW = SIDE0 + 2 * SIDE_N + 22
# K_SUM_UNITS (the K cut's sum shared by the sides), after WARM's: the units (0: the caller's _k_sum after the join)
# and the caller's longest wait for the helper's partial sums in cycles (bind only), the job's control words' address,
# the partial sums done and the units' claim word (written per call)
KS_UNITS, KS_WAIT, KS_CTL, KS_DONE, KS_CLAIM = range(SIDE0 + 2 * SIDE_N + 23, SIDE0 + 2 * SIDE_N + 28)
NDESC = SIDE0 + 2 * SIDE_N + 28
DW_FNS = ("r1", "r1z", "s2", "s2z", "p2", "p2z", "max1", "max2")  # DWFN: dwtile's plane drivers, in this order
# (max1, max2: its MaxPool 3x3 planes, stride 1 and 2: maxpool_pair)

# A layer pairs from this estimated one-thread time (microseconds): 1x1 layers at ~60 GFLOP/s,
# depthwise ones by dwtile.cost_us. The hand-over costs ~1-3 us a layer (a store, the helper's poll,
# the end wait), MobileNetV2's smallest layers ~25 us.
MIN_US = 12.0
FLOPS_PER_US = 6.0e4
# Even halves for the serial pairs' 1x1 layers (issue 11, session 16; docs/numba.md, "MobileNetV2's small layers at
# two threads"). SPLIT_SERIAL: COLS_SPLIT's cut (the 48-channel cols panel at the middle split by pixels, whole tiles of
# 7) for the one-image serial pairs too (MobileNetV2's 7x7 layers), where whole panels gave 160 channels (three panels
# and one of 16) as 96 against 64 and 320 as 192 against 128. PIXEL_EVEN: a serial pair by pixels cuts at the tile
# boundary nearest the middle pixel, where it took the first half of the tiles rounded up (196 pixels, six tiles of 32
# and one of 4, as 128 against 68; 784 as 416 against 368). Each half is still one call of the one-thread driver
# over its part: the output is the one-thread path's bit for bit. Read when a layer binds.
SPLIT_SERIAL = False
PIXEL_EVEN = False
# The serial pairs' 1x1 layers on the cols tiles up to this many output pixels (issue 11, session 16, same section), as
# a one-thread session runs them (conv.FTILE_COLS_MAX_ONE_THREAD: MobileNetV2's 14x14 projections, 576 -> 96, 384 -> 64,
# 384 -> 96, 192 -> 64; the expansions' K of 64 and 96 stays below conv.FTILE_COLS_MIN_K), where the two-thread session
# ran them on the rows tiles (conv.FTILE_COLS_MAX, 64): on the Xeon those pairs ran at 0.89-1.00 of the one-thread time
# (nodes_ab2t.py, two calls), the layers that pair on the cols tiles at 7x7 at 0.59-0.78. Such a pair cuts as
# SPLIT_SERIAL does (64 channels: a panel of 48 and one of 16). Each half is the one-thread driver over its part: the
# output is the one-thread path's bit for bit. Read when a layer binds (conv_serial._bind). 0: FTILE_COLS_MAX's rule.
# Off: not measured on the Xeon. A/B: kernels.cpair.SERIAL_COLS_MAX=196
SERIAL_COLS_MAX = 0
# A projection's K cut between the sides (issue 11, session 16, same section): a one-image serial pair of a 1x1 layer
# on the rows tiles with fewer output than input channels, on maps of at most K_SPLIT pixels, runs every output on both
# sides, each over its own half of the input channels, the input rows that the depthwise layer before wrote on its
# core (its planes cut at the same channel as the expansion's, _cuts), with no epilogue: side 0 into the output, side
# 1 into a buffer of the layer's; after the join the caller adds the two, the bias and the residual and clamps
# (``_k_sum``). Each half read the whole input, half of it from the other core's L2 (576 -> 96 at 14x14: 225 KB of
# 451), where the caller now reads the helper's partial sums (75 KB). The sums run in another order: the output is
# within the fp32 tolerances of the one-thread path's, not its bits. Read when a layer binds. 0: off. On at 784 (the
# 14x14 and 28x28 projections) since session 17 (docs/numba.md, "MobileNetV2's projections cut by their input channels
# at two threads"): on the Xeon (nodes_ab2t.py mobilenet_v2, two processes) those six kinds ran 1.17-1.32x faster
# (576 -> 96 +Z 1.24-1.25, 384 -> 64 +Z 1.30-1.32, 192 -> 32 +Z 1.19-1.28), the kinds it does not touch 0.89-1.13,
# the sum over the nodes 1.045 and 1.047; the whole model 1.08 (turns.py, 12 rounds). A/B: kernels.cpair.K_SPLIT=0
K_SPLIT = 784
K_SPLIT_MIN_K = 128  # input channels from which a projection cuts its K
# K_SPLIT on the cols tiles (issue 11, session 17; docs/numba.md, "MobileNetV2's projections cut by their input channels
# at two threads"): a one-image serial pair of a 1x1 layer on the cols tiles (maps of at most this many pixels) with
# fewer output than input channels and K >= K_SPLIT_MIN_K runs every panel on both sides, each over its part of the
# input channels (the cut at the writer's, _cuts), side 1 into the layer's buffer, no epilogue; the caller sums after
# the join (_k_sum), as K_SPLIT does on the rows tiles. 49 takes MobileNetV2's 7x7 projections (960 -> 160 +Z, 960 ->
# 320, 576 -> 160: 0.68-0.82 of one thread on the Xeon, each side reading the whole input, half of it from the other
# core's L2). The serial pairs' side of COLS_K_SPLIT (the bound parallel call's, r50c17): the same halves. Not bit for
# bit the one-thread path (within the fp32 tolerances). Read when a layer binds. 0: off (not measured on the Xeon).
# A/B: kernels.cpair.K_SPLIT_COLS=49
K_SPLIT_COLS = 0
# A K cut's sum shared by the two sides (issue 11, session 18; docs/numba.md, "The K cuts' sum on both sides"): > 0, a
# K-cut pair (K_SPLIT, K_SPLIT_PARALLEL, K_SPLIT_COLS) ends each side with the sum of its output (side 0's partial sums
# + side 1's + the bias (+ the residual), clamped: ``_k_sum``'s) in this many units of output channels, claimed from
# one word (pairs.claim_ends: side 0 from the front, side 1 from the back) once both sides' partial sums are done
# (pairs.count_up, wait_count), where the caller ran the whole sum alone after the join. The helper's side always
# waits for the caller's partial sums (the caller runs side 0 first in every job); the caller's side joins only where
# the helper has claimed side 1 (the job's state word), else it returns and runs side 1 and then every unit itself
# (pair_job's claim, a refused pair's K_SOLO). The caller's side waits for the helper's partial sums K_SUM_WAIT_US at
# most, then leaves the units to the helper: past that it waits in pair_job, where the wait counts toward the stall
# rule (pairs.STALL_S: a helper that lost its core mid-layer) as before. Each element is _k_sum's expression (the same
# jitted code): the output is the caller's sum's bit for bit whoever adds which unit. Read when a layer binds. 0: off.
# Off: on the Xeon (session 18, kcut18's call) not resolved either way per kind; the sum it shares is 5-11 us a 14x14
# projection alone on one core (the dev box). A/B: kernels.cpair.K_SUM_UNITS=16
K_SUM_UNITS = 0
K_SUM_WAIT_US = 50.0
# A K-cut pair (K_SPLIT, K_SPLIT_PARALLEL) that is refused (the helper asleep or backed off, the pool's worker spinning,
# another caller's job) runs both its sides and the sums on the caller (issue 11, session 17), not the one-thread
# driver over the whole K: the layer's output is then the same bits whether the helper came or not (the K cut sums in
# another order than the one-thread path), as the halves of the other pairs are. Both sides on one core cost
# 1.01-1.02x the one-thread call at 14x14 (session 16, the AMD box). False: the one-thread call.
K_SOLO = True
# The same for a refused depthwise pair (issue 11, session 17, same section): its caller runs both halves through the
# pair's own compiled half, not dwtile's plane driver called alone, whose stride-1 sums come out of LLVM otherwise in
# the last bits (144@56, 384@14, 960@7), so that a two-thread run in which a depthwise pair was refused (the first run
# after the helper slept, a back-off) gives the paired runs' bits. False: the serial plane driver.
DW_SOLO = True
# K_SPLIT for the bound parallel call's one-image pairs (issue 11, session 17; docs/numba.md, "ResNet-50's projections
# cut by their input channels at two threads"): a 1x1 projection on the rows tiles (fewer output than input channels,
# K >= K_SPLIT_MIN_K) on maps of at most this many pixels runs every output on both sides, each over the input channels
# that the layer before wrote on its own core (the expansion's channel cut, _cuts), side 1 into the layer's buffer, the
# caller adding the two, the bias (and the residual) after the join (``_k_sum``), as K_SPLIT does for the serial pairs.
# ResNet-50's 1024 -> 256 and 1024 -> 512 at 14x14 (196), 512 -> 128 and 512 -> 256 at 28x28 (784) cut by channels or
# pixels read the whole input on each side, half of it from the other core's L2 (400 KB of 800 at 1024 x 196), and
# each side's rows tiles copy (pack) every input row they read: two copies of the input a layer, where the K cut packs
# each half once on the core that wrote it. The sums run in another order: within the fp32 tolerances of the one-
# thread path, not its bits. Read when a layer binds. 0: off. A/B: kernels.cpair.K_SPLIT_PARALLEL=196 (or 784)
# 196 since session 17's F1, with COLS_WHOLE (see there).
K_SPLIT_PARALLEL = 196
# the split of a 1x1 layer on the rows tiles: "auto" (an expansion, more output channels than input ones, by
# channels, as the depthwise layer after it; a projection by pixels where it has at least PIXEL_TILES tiles
# of pixels, else by channels where its panels split evenly, else by pixels), "channels", "pixels"
AXIS = "auto"
# "auto" for the bound parallel call's one-image expansions on the rows tiles (issue 11, session 18; docs/numba.md,
# "ResNet-50's expansions and strided 1x1 layers at two threads"): on maps of at least this many pixels by pixels (whole
# tiles, the caller the first), not by channels. ResNet-50's 56x56 (and 28x28) blocks then keep each core on the same
# pixels from layer to layer: the projection before is cut by pixels ("auto", 98 and 25 tiles), the F(4x4) 3x3 by runs
# of tiles, the expansion by pixels too, so that each side reads the input and the residual (the block's input, the
# previous expansion's output) that its own core wrote and packs only its pixels (64 -> 256 at 56x56: each side packed
# the whole 800 KB input, half of it from the other core's L2, for its 128 channels), reading every weight row (64 KB;
# 256 KB at 28x28). Each part is one call of the one-thread driver: bit for bit the channel cut. Read when a layer
# binds. 0: off (the channel cut). Not measured on the Xeon. A/B: kernels.cpair.EXPAND_PIXELS=3136 (or 784; AXIS=pixels
# cuts every rows-tile layer by pixels, the same layers under the other defaults)
EXPAND_PIXELS = 0
PIXEL_TILES = 16  # the Xeon (session 10): 192 -> 32 at 28x28 by channels 0.87-0.90x the one-thread time,
# 144 -> 24 at 56x56 by pixels 1.85x; at 14x14 (7 tiles, 4 : 3) the channels (384 -> 64: 1.27-1.30x)
PAIR_POINTWISE = True  # the 1x1 layers pair (False: for A/B runs)
PAIR_DEPTHWISE = True  # the depthwise layers pair
PAIR_IMPLICIT = True  # the strided stems on the implicit GEMM pair
# A batch of images pairs too, at exactly two threads (issue 11, session 11; False: batch 1 only). Each side
# loops over its images: "images" (the caller the first half of the batch, the helper the rest, every channel),
# "channels" (each side its channel (or pixel) part of every image, as at batch 1), "auto" (images where the
# batch is even, else channels). The stem stays one image a hand-over, by channels.
BATCH = True
BATCH_AXIS = "auto"
# a batch by images: each side claims its next image as it goes, the caller from the front, the helper from the
# back (with the same speed the static halves; a helper that lost its core mid-layer leaves the caller the
# images it has not begun, so the caller waits for one image at most). False: fixed halves [N0, N1)
DYNAMIC = True
IMAGE_STALL = True  # such a pair's stall: a wait past STALL_S plus one of the caller's images (False: fpair's
# slack of half the caller's own half)
IMPLICIT_IMAGES = True  # a stem of a batch by images: one hand-over a batch, each side its images' phases and
# every channel (False: one hand-over an image by channels, the caller filling the phases)
# A one-image layer of the bound parallel call (ResNet-50's 1x1 layers at 7x7, and at 14x14 where they take
# the cols tiles: conv_serial.PAIR_COLS_MAX) on the cols tiles cuts its 48-channel panels where both sides get
# the same channels x pixels, the panel at the cut split by pixels (whole tiles of 7): 512 channels (10 panels
# and one of 32) were 6 panels (288 channels) against 5 (224), 256 (5 and one of 16) 144 against 112.
# Issue 11, session 12 (r50t12), nodes_ab2t.py: ResNet-50's 2048 -> 512 at 7x7 1.10x faster on the AMD box
# (512 -> 2048 1.03x), at par on the Xeon (1.01-1.04x slower against 0.97-1.03x for an identical session).
# False: whole panels, the caller the first half (rounded up).
COLS_SPLIT = True
# A one-image 1x1 layer's cut that follows the cores (issue 11, session 14; docs/numba.md, "A cut that follows the
# cores in the 1x1 halves"): rnpair.FOLLOW's rule on this module's halves. The cut is counted in the units the layer
# splits: the rows tiles' weight panels (MR channels, a layer by channels) or pixel tiles (NR pixels, by pixels), the
# cols tiles' (panel, tile of COLS_MP pixels) steps (the panel at the cut split by pixels, as COLS_SPLIT's). After
# each paired call the cut moves by FOLLOW_GAIN of the units that would have evened the two sides' ends (the
# helper's start plus its half against the caller's half, from fpair's cycle stamps, over twice the layer's cycles
# a unit), at most FOLLOW_STEP of the units a call (at least one), not within one unit's time, within FOLLOW_RANGE
# of the units either side of the bound cut, and not where the helper came after the caller's half. Each half is
# the one-thread driver over its part, so the output is the even cut's bit for bit at every cut
# (test_rnpair.py::test_follow_cut_pointwise). Read at each call. False: the bound cut. Off: not yet on the Xeon.
FOLLOW = False
FOLLOW_GAIN = 0.5
FOLLOW_STEP = 0.02
FOLLOW_RANGE = 0.15
# A one-image 1x1 layer's uneven halves evened by a claimed middle (issue 11, session 15; docs/numba.md, "A middle
# that the faster core claims"): the bound parallel call's layers (ResNet-50's) keep a fixed bulk a side (the caller's
# first units, the helper's last, each one tuned call of the one-thread driver as before), and the TAIL_SHARE of the
# layer's units between them is claimed one unit at a time from one word (pairs.claim_ends: the caller from the front,
# after its bulk, the helper from the back, after its own), so that the side whose core runs faster takes more of
# it and the caller waits for one unit of the helper's at most past its own bulk. Units: the rows tiles' weight
# panels (by channels) or pixel tiles (by pixels), grouped into at most TAIL_UNITS claims; the cols tiles' 48-channel
# panels, each cut into pieces of whole 7-pixel tiles (TAIL_UNITS claims at most). Each unit is one call of the
# one-thread driver over its part, so the output is the even cut's bit for bit whoever claims which unit
# (test_tail.py::test_tail_pointwise). Read when a layer binds; replaces COLS_SPLIT's and FOLLOW's cut there. Off: on
# the Xeon (session 15's call, benchmarks/tail15_round.sh, 7 rounds quiet) the sides' ends came together (ResNet-50:
# 2.3 ms a run apart against 7.0, with TAIL_DIRECT) but the blocks did not gain (default / tail 0.97, 0.78-1.15).
# On since session 19 (docs/numba.md, "Uneven cores on the H200 host"): on the H200 machine's Xeon one side of a pair
# often runs 10-25 % slower than the other for whole blocks; 16 rounds quiet, default / tail 1.19 (ResNet-50) and
# 1.07 (ResNet-18) by the rounds' medians, level in the fast blocks.
TAIL = True
TAIL_SHARE = 0.25
TAIL_UNITS = 8
# The cols halves' weight prefetch (issue 11, session 15; docs/numba.md, "The weights' prefetch in the two-thread
# halves"): > 0, the cols tiles of this module's halves (ResNet-50's 7x7 1x1 layers at two threads, the 14x14 ones
# too where conv_serial.PAIR_COLS_MAX takes them) prefetch their weights' row k + COLS_AHEAD into L1 at step k
# (ftile.cols_driver_ahead, as a one-thread session's 1x1 calls with conv.COLS_AHEAD_ONE_THREAD), and so does the
# caller's whole-layer call where the pair is refused (conv_serial._tiles_call). Read when a layer binds: a pair's
# half is the compiled half of its value (one per value a process: half_address(ahead)), the other ops' code the
# same. The prefetch changes no arithmetic: the halves stay the one-thread path's bit for bit. On (16): on the Xeon
# (benchmarks/ahead15_round.sh, nodes_ab2t.py resnet50, two orders, with rnpair.DIRECT_AHEAD) ResNet-50's 7x7 layers
# 1.12-1.26x faster per kind (2048 -> 512 0.98 and 1.17); with rnpair.DIRECT_AHEAD, default / both off 0.94
# (0.82-1.02) on ResNet-50 in the lead's call L2a (turns alone on CPUs 0,1, 8 rounds). A/B: kernels.cpair.COLS_AHEAD=0
COLS_AHEAD = 16
# True: the cols halves (and the refused pair's whole-layer call) take a one-thread session's K chunk
# (conv_serial.one_thread_cols_kc: conv.FTILE_COLS_KC_SMALL_ONE_THREAD on 7x7, FTILE_COLS_KC_ONE_THREAD above, 128:
# a 48-channel panel's chunk of 24 KiB stays in L1 over the map's tiles) instead of ftile.COLS_KC (512, 96 KiB).
# The chunks' partial sums pass through the scratch unrounded (float32 stores), so the output is the same bit for
# bit. Read when a layer binds. False: COLS_KC. Off: on the Xeon (ahead15_round.sh) 0.92-1.08x per 7x7 kind, on top
# of the prefetch 0.94-1.04x. A/B: kernels.cpair.COLS_KC_ONE_THREAD=1
# On with COLS_WHOLE since session 17's F1 (below).
COLS_KC_ONE_THREAD = True
# The cols halves on a one-thread session's tiles (issue 11, session 17; docs/numba.md, "ResNet-50's 14x14 1x1 halves
# on the one-thread tiles"): True, the cols tiles of this module's halves (and the refused pair's whole-layer call)
# run every tile of COLS_MP valid pixels on the tile whose pixels sit at constant offsets from one pointer
# (ftile.cols_driver_ahead's ``whole``, as a one-thread session's calls with ftile.COLS_WHOLE_ONE_THREAD), the last
# partial tile and the narrow ones on the general tile. With conv_serial.PAIR_COLS_MAX=196 and COLS_KC_ONE_THREAD each
# half of ResNet-50's 14x14 1x1 layers is then the one-thread call's code (3 x 7 whole tiles, K chunk 128, prefetch
# 16) over its part, where the pairs' 14x14 halves ran the 8-row rows tiles (196 pixels as 208) at ~70 % of the one-
# thread call's rate. Read when a layer binds (Pair.cwhole; the half of each value: half_address(ahead, xahead,
# whole)). The same values either way (the tiles' sums in the same order). False: the general tile.
# A/B: kernels.cpair.COLS_WHOLE=1 (with kernels.conv_serial.PAIR_COLS_MAX=196;kernels.cpair.COLS_KC_ONE_THREAD=1)
# On since the lead's call F1 of session 17 (docs/benchmarks.md, "Round 17"; turns alone on CPUs 0,1, 7 rounds, with
# PAIR_COLS_MAX 196, COLS_WHOLE, COLS_KC_ONE_THREAD, K_SPLIT_PARALLEL 196 and COLS_K_SPLIT together, `cwk`): ResNet-50
# default / cwk 1.25 (0.61-1.49; 4 of 7 rounds; 1.12 by the blocks' best calls), ResNet-18 0.95 (0.86-1.08; its one
# touched layer the 14x14 shortcut); per kind (r50c17's call) the 14x14 projections 1.27-1.33x, the nodes' sum 1.04.
COLS_WHOLE = True
# K_SPLIT_PARALLEL on the cols tiles (issue 11, session 17, same section): True, a one-image projection that the bound
# parallel call pairs on the cols tiles (conv_serial.PAIR_COLS_MAX: ResNet-50's 1024 -> 256 and 1024 -> 512 at 14x14)
# on maps of at most K_SPLIT_PARALLEL pixels cuts its K as the rows tiles' K_SPLIT_PARALLEL does: each side runs every
# panel over the input channels that the layer before wrote on its core (_cuts), side 0 into the output, side 1 into
# the layer's buffer, with no epilogue, and the caller adds the two, the bias (and the residual) after the join
# (_k_sum). Each side's weights are its K range of the packed panels, copied once at bind. Within the fp32 tolerances
# of the one-thread path, not its bits. Read when a layer binds. False: the cols halves cut the output channels.
# A/B: kernels.cpair.COLS_K_SPLIT=1 (with K_SPLIT_PARALLEL=196 and conv_serial.PAIR_COLS_MAX=196)
# On with COLS_WHOLE since session 17's F1 (above).
COLS_K_SPLIT = True
# The rows halves' pixel prefetch (issue 11, session 16; docs/numba.md, "The weights' prefetch in the Winograd
# products"): > 0, a rows-tiles side that reads its pixel rows in place (ftile.pack_rows false: fewer than 128 weight
# rows a side, ResNet-50's 256 -> 64 and 64 -> 64 at 56x56, both sides of a pixel cut) prefetches row k + ROWS_X_AHEAD's
# pixels into L1 at step k (ftile.rows_driver_ahead, as a one-thread session's with ftile.ROWS_X_AHEAD_ONE_THREAD);
# the packed sides keep the plain driver. The rows tiles' weights need none: a panel's (8 rows x K) stays in L1 over
# the block's tiles. Read when a layer binds (Pair.xahead; the half of both values: half_address(ahead, xahead)). The
# same values either way. 0: off. On the Xeon (benchmarks/wino16_round.sh, nodes_ab2t.py resnet50, two processes)
# 256 -> 64 at 56x56 1.07-1.19x per kind (rnpair.WINO_AHEAD's session, which does not touch it: 0.90-0.94); whole
# models with WINO_AHEAD above. A/B: kernels.cpair.ROWS_X_AHEAD=8
ROWS_X_AHEAD = 0
# A one-image 1x1 strided layer's subsampled input filled by both sides (issue 11, session 16; docs/numba.md,
# "ResNet-50's pairs per kind of layer"): conv_serial's SUBSAMPLE copies every sh-th row and sw-th column of the input
# into a contiguous buffer that the tiles read (ResNet-50's three 1x1/2 shortcuts: 256 x 28 x 28 floats from a
# 256 x 56 x 56 input); in a pair that copy was the caller's alone, in NumPy, before the job. With this on, the bound
# parallel call's pair takes the raw input, and both sides copy it at the start of their halves in SUB_UNITS units of
# input channels claimed from one word (the caller from the front, the helper from the back), then wait until every
# unit is done (pairs.wait_count). The buffer holds the same floats whoever copies which channels, so the output is
# the one-thread path's bit for bit. Read when a layer binds. False: the caller copies. Session 18 (exp18's call,
# nodes_ab2t.py resnet50 12): the three 1x1/2 kinds 1.03-1.08, 1.049 together, against 1.001 on the untouched kinds.
SUB_SPLIT = False
SUB_UNITS = 8
# SUB_SPLIT with each side on its own pixels (issue 11, session 18; docs/numba.md, "ResNet-50's expansions and strided
# 1x1 layers at two threads"): True, such a layer on the rows tiles (ResNet-50's 256 -> 512 from 56x56, 784 output
# pixels) is cut by output pixels (whole tiles, the caller the first), and each side copies the subsampled input of
# its own pixels (every input channel) at the start of its half and reads only those: no unit claimed from the other
# side, no wait for it, and no line of the buffer from the other core's L2, where with the cut by channels each side
# read the whole 800 KB buffer (the helper all of it from the caller's core where the caller copied it, half of it
# with SUB_SPLIT). Each side then reads every weight row (512 KB). Needs SUB_SPLIT; not with a TAIL middle. The same
# floats copied and the one-thread driver over each part: the output is the one-thread path's bit for bit. Read when a
# layer binds. False: the channel cut. A/B: kernels.cpair.SUB_SPLIT=1;kernels.cpair.SUB_OWN=1
SUB_OWN = False
# The stem's padded phases filled by both sides (issue 11, session 17; docs/numba.md, "MobileNetV2's projections cut
# by their input channels at two threads"): a one-image pair of a strided stem on the implicit GEMM (MobileNetV2's
# 3x3/2, 3 -> 32 at 224x224), whose caller filled the whole input's zero-padded column phases (ftile.phases_padded)
# before the job (0.20 ms of the stem's 0.52 at one thread on the Xeon, serial at two threads), takes the raw input
# instead; both sides fill its phases at the start of their halves in about STEM_UNITS units (an input channel's band
# of padded rows) claimed from one word (the caller from the front, the helper from the back: SUB_SPLIT's way), then
# wait until every unit is done (pairs.wait_count). The phases hold the same floats whoever fills which unit, so the
# output is the one-thread path's bit for bit. Read when a layer binds. False: the caller fills them. Off: on the Xeon
# the stem read 0.99, 1.11 and 1.16x faster in three processes, the whole model 1.03 (0.69-1.27) quiet and 0.99
# loaded, within the spread. A/B: kernels.cpair.STEM_SPLIT=1
STEM_SPLIT = False
STEM_UNITS = 12
# An expansion's halves pull their lines in first (issue 11, session 18; docs/numba.md, "ResNet-50's expansions and
# strided 1x1 layers at two threads"): the bound parallel call's one-image pair of a 1x1 layer with more output than
# input channels (ResNet-50's +Z expansions, its 1x1/2 shortcuts) on maps of at most WARM_MAX pixels, not cut by K,
# reads, at the start of each side's half, every cache line of what its tiles will read, in one sequential pass
# (``warm_side``: a load a line, four sums kept, the total stored into the side's scratch so that the loads stay): bit 1
# the whole input (each side reads all of it: at 14x14 256 x 196 floats, half of them written by the other core in the
# 3x3 layer before, cut by channels, or copied by the caller for a 1x1/2 shortcut: all of it for the helper), bit 2
# the residual's rows of the side's own output channels (the cols tiles load them channel row by channel row in the
# last K chunk, 48 rows 784 bytes apart a tile, which the hardware's prefetchers do not follow). The tiles then find
# them in their core's L2, where their strided first pass took each line from the other core's L2 or from L3 in
# turn (r50c17: the 14x14 expansions' cols sides ran at 88-93 GFLOP/s side by side against 97 in turn, the halves'
# input the part that no cut keeps on one core). Nothing in the arithmetic changes: the output is the pair's without
# it, bit for bit. Read when a layer binds. 0: off: on the Xeon (one call, nodes_ab2t.py resnet50 12 with WARM_MAX 3136)
# the 14x14 +Z kind read 1.10 (bit 1), 1.07 (3) against 1.06 and 1.14 on that process's untouched 14x14 projections, the
# 56x56 +Z kind 0.96 and 0.90 (the residual's pass 1.6 MB a side), the touched kinds together 1.02 and 1.01 against 1.00
# and 1.02 untouched; in pair_rate14.py's chain the expansion's helper side 104 -> 117 GFLOP/s (its input all written by
# the caller's _k_sum there). A/B: kernels.cpair.WARM=1 (or 3)
WARM = 0
WARM_MAX = 196


@jit
def subsample(x, buf, sh, sw, c0, c1):
    """buf[c, i, j] = x[c, i * sh, j * sw] for the channels [c0, c1) (``x`` (C, H, W), ``buf`` (C, OH, OW)): the
    1x1 strided layer's input (np.copyto(buf, x[:, ::sh, ::sw])'s floats)."""
    subsample_block(x, buf, sh, sw, c0, c1, 0, buf.shape[1] * buf.shape[2])


@jit
def subsample_block(x, buf, sh, sw, c0, c1, p0, p1):
    """subsample's floats for the channels [c0, c1) and the output pixels [p0, p1) (flat, row-major) of each
    (SUB_OWN's side: every channel, its own pixels)."""
    ow_n = buf.shape[2]
    for c in range(c0, c1):
        p = p0
        while p < p1:
            i = p // ow_n
            j0 = p - i * ow_n
            j1 = min(ow_n, j0 + p1 - p)
            for j in range(j0, j1):
                buf[c, i, j] = x[c, i * sh, j * sw]
            p += j1 - j0


def stem_split(pair, x_shape, phases) -> bool:
    """STEM_SPLIT on a one-image implicit ``pair`` (not a batch by images) of input ``x_shape`` and ``phases`` =
    (stride, pad top, pad left, padded rows, columns a phase): the descriptor's units (U_N; U_H: the bands a channel)
    and the input's geometry; whether it took them."""
    if pair is None or not STEM_SPLIT or pair.whole or phases is None:
        return False
    d = pair.desc
    c_n = int(x_shape[1])
    bands = max(1, min(int(STEM_UNITS) // max(c_n, 1), int(phases[3])))
    d[U_N], d[U_H] = c_n * bands, bands
    d[C], d[H], d[W] = x_shape[1:]
    d[STRIDE], d[PH], d[PL], d[HP], d[QP] = phases
    return True


def sub_split(pair, x_shape, sh: int, sw: int, sub_shape) -> bool:
    """SUB_SPLIT on a one-image 1x1 strided layer's ``pair`` (its input ``x_shape``, strides, the subsampled
    ``sub_shape``): the descriptor's units and geometry; whether it took them."""
    if pair is None or not SUB_SPLIT or x_shape[0] != 1:
        return False
    d = pair.desc
    d[U_N], d[U_H], d[U_W], d[U_SH], d[U_SW] = max(1, min(int(SUB_UNITS), x_shape[1])), x_shape[2], x_shape[3], sh, sw
    d[OH], d[OW] = sub_shape[2], sub_shape[3]
    if sub_own(pair):
        d[U_N] = OWN_PIXELS
    return True


OWN_PIXELS = -1  # U_N of a SUB_OWN pair: each side copies its own pixels


def sub_own(pair) -> bool:
    """Whether SUB_OWN's copy fits ``pair`` (bound with ``sub``): the rows tiles cut by pixels, one image, no
    middle."""
    d = pair.desc
    s1 = SIDE0 + SIDE_N
    return bool(SUB_OWN) and d[OP] == ROWS and d[KS_CUT] == 0 and d[T_N] == 0 and d[DYN] == 0 and \
        d[SIDE0 + S_MC] == d[s1 + S_MC] == d[M] and d[s1 + S_P0] > 0


def cols_kc(l_n: int) -> int:
    """The cols halves' K chunk on a map of ``l_n`` pixels (COLS_KC_ONE_THREAD's rule, read now)."""
    if COLS_KC_ONE_THREAD:
        from .conv_serial import one_thread_cols_kc

        return one_thread_cols_kc(l_n)
    return ftile.COLS_KC


def _drivers(ahead: int = 0, xahead: int = 0, whole: bool = False):
    """(rows, rows reading in place, cols, the six depthwise plane drivers) of KIND; the cols tiles prefetching
    their weights ``ahead`` steps on (and with ``whole``, their full tiles' pixels at constant offsets: COLS_WHOLE),
    the in-place rows tiles their pixel rows ``xahead`` (0: none, the rows driver itself)."""
    dw = (dwtile._planes_r1, dwtile._planes_r1z, dwtile._planes_s2, dwtile._planes_s2z, dwtile._planes_p2,
          dwtile._planes_p2z)
    return (ftile.rows_driver(KIND), ftile.rows_driver_ahead(KIND, xahead), ftile.cols_driver_ahead(KIND, ahead, whole),
            dw)


def _build(ahead: int = 0, xahead: int = 0, whole: bool = False):
    """The compiled ``half(desc_address, side) -> 0`` (side 0 the caller's, 1 the helper's), a closure
    over the drivers of KIND (the cols tiles' weights prefetched ``ahead`` steps on: COLS_AHEAD's value
    where the pair was bound; ``whole``: COLS_WHOLE's; the in-place rows sides' pixels ``xahead``: ROWS_X_AHEAD's),
    keyed for the disk cache by name (cache.CLOSURE_KEY, as ftile's drivers); fpair's helper reaches it by address
    (``half_address``)."""
    rows, rowsx, cols, (dw0, dw1, dw2, dw3, dw4, dw5) = _drivers(ahead, xahead, whole)
    implicit = ftile.implicit_driver(KIND)
    phases = ftile.phases_padded
    mx1, mx2 = dwtile._max_planes_s1, dwtile._max_planes_s2
    sub = subsample
    sub_block = subsample_block
    stem = ftile.phases_block
    ksum = _k_sum_shared
    f32 = np.float32

    def half(addr, side):
        d = numba.carray(_ptr(addr), (NDESC,), np.int64)
        b = SIDE0 + side * SIDE_N
        fv = numba.carray(_ptr(d[FV]), (2,), f32)
        lo, hi = fv[0], fv[1]
        has_z = d[HAS_Z] != 0
        op = d[OP]
        if op == DEPTHWISE:  # planes [q0, q1) of each of the side's images
            n4 = (1, d[C], d[H], d[W])
            o4 = (1, d[M], d[OH], d[OW])
            xs, ys = 4 * d[C] * d[H] * d[W], 4 * d[M] * d[OH] * d[OW]
            w = numba.carray(_ptr(d[WA]), (d[M], 1, 3, 3), f32)
            bias = numba.carray(_ptr(d[BIAS]), (d[M],), f32)
            q0, q1 = d[b + S_C0], d[b + S_MC]
            fn, ph, pw, band = d[DWFN], d[PH], d[PW], d[BAND]
            n = _image(d, b, side, -1)
            while n >= 0:
                x = numba.carray(_ptr(d[XA] + n * xs), n4, f32)
                y = numba.carray(_ptr(d[YA] + n * ys), o4, f32)
                z = numba.carray(_ptr((d[ZA] if has_z else d[YA]) + n * ys), o4, f32)
                if fn == 6:
                    mx1(x, y, ph, pw, band, q0, q1)
                elif fn == 7:
                    mx2(x, y, ph, pw, band, q0, q1)
                elif fn == 0:
                    dw0(x, w, bias, y, z, ph, pw, lo, hi, band, q0, q1)
                elif fn == 1:
                    dw1(x, w, bias, y, z, ph, pw, lo, hi, band, q0, q1)
                elif fn == 2:
                    dw2(x, w, bias, y, z, ph, pw, lo, hi, band, q0, q1)
                elif fn == 3:
                    dw3(x, w, bias, y, z, ph, pw, lo, hi, band, q0, q1)
                elif fn == 4:
                    dw4(x, w, bias, y, z, ph, pw, lo, hi, band, q0, q1)
                else:
                    dw5(x, w, bias, y, z, ph, pw, lo, hi, band, q0, q1)
                n = _image(d, b, side, n)
            return 0
        k_n, m_n, l_n = d[K], d[M], d[L]
        if op == IMPLICIT and d[IMGS] != 0:  # whole images [n0, n1), every channel, the phases in the scratch
            xpp = numba.carray(_ptr(d[SCR0 + side]), (d[XPP_N],), f32)
            koff = numba.carray(_ptr(d[KOFF]), (k_n,), np.int64)
            wp = numba.carray(_ptr(d[WA]), (m_n * k_n,), f32)
            bias = numba.carray(_ptr(d[BIAS]), (m_n,), f32)
            c_n, h_n, w_n = d[C], d[H], d[W]
            n = _image(d, b, side, -1)
            while n >= 0:
                x = numba.carray(_ptr(d[XA] + 4 * n * c_n * h_n * w_n), (c_n, h_n, w_n), f32)
                phases(x, xpp, d[STRIDE], d[PH], d[PL], d[HP], d[QP], 0, c_n)
                y = numba.carray(_ptr(d[YA] + 4 * n * m_n * l_n), (m_n * l_n,), f32)
                z = numba.carray(_ptr((d[ZA] if has_z else d[YA]) + 4 * n * m_n * l_n), (m_n * l_n,), f32)
                implicit(wp, k_n, m_n, xpp, koff, d[BAND], d[OW], bias, z, has_z, lo, hi, y, l_n, 0, d[OH])
                n = _image(d, b, side, n)
            return 0
        if op == IMPLICIT:  # output channels [c0, c0 + mc) of every output row (one image a call)
            c0, mc = d[b + S_C0], d[b + S_MC]
            xpp = numba.carray(_ptr(d[XPP]), (d[XPP_N],), f32)
            if d[U_X] != 0:  # STEM_SPLIT: the phases' units (a channel's band of rows) claimed by both, then all done
                units, bands, hp = d[U_N], d[U_H], d[HP]
                xr = numba.carray(_ptr(d[U_X]), (d[C], d[H], d[W]), f32)
                while True:
                    u = pairs.claim_ends(d, U_CLAIM, side)
                    if u < 0:
                        break
                    ch = u // bands
                    band_i = u - ch * bands
                    stem(xr, xpp, d[STRIDE], d[PH], d[PL], hp, d[QP], ch, ch + 1, band_i * hp // bands,
                         (band_i + 1) * hp // bands)
                    pairs.count_up(d, U_DONE)
                pairs.wait_count(d, U_DONE, units)
            koff = numba.carray(_ptr(d[KOFF]), (k_n,), np.int64)
            wp = numba.carray(_ptr(d[WA] + 4 * c0 * k_n), (mc * k_n,), f32)
            bias = numba.carray(_ptr(d[BIAS] + 4 * c0), (mc,), f32)
            y = numba.carray(_ptr(d[YA] + 4 * c0 * l_n), (mc * l_n,), f32)
            z = numba.carray(_ptr((d[ZA] if has_z else d[YA]) + 4 * c0 * l_n), (mc * l_n,), f32)
            implicit(wp, k_n, mc, xpp, koff, d[BAND], d[OW], bias, z, has_z, lo, hi, y, l_n, 0, d[OH])
            return 0
        xs, ys = 4 * k_n * l_n, 4 * m_n * l_n
        scratch = numba.carray(_ptr(d[SCR0 + side]), (d[b + S_SCR_N],), f32)
        if d[U_X] != 0 and d[U_N] == OWN_PIXELS:  # SUB_OWN: the side's own pixels of the subsampled input
            xr = numba.carray(_ptr(d[U_X]), (k_n, d[U_H], d[U_W]), f32)
            xb = numba.carray(_ptr(d[XA]), (k_n, d[OH], d[OW]), f32)
            sub_block(xr, xb, d[U_SH], d[U_SW], 0, k_n, d[b + S_P0], d[b + S_P0] + d[b + S_NP])
        elif d[U_X] != 0:  # SUB_SPLIT: the subsampled input's channel units claimed by both sides, then all done
            units = d[U_N]
            xr = numba.carray(_ptr(d[U_X]), (k_n, d[U_H], d[U_W]), f32)
            xb = numba.carray(_ptr(d[XA]), (k_n, d[OH], d[OW]), f32)
            while True:
                u = pairs.claim_ends(d, U_CLAIM, side)
                if u < 0:
                    break
                sub(xr, xb, d[U_SH], d[U_SW], u * k_n // units, (u + 1) * k_n // units)
                pairs.count_up(d, U_DONE)
            pairs.wait_count(d, U_DONE, units)
        if d[XW] != 0:  # WARM: the side's input (and residual) lines in one sequential pass first
            warm_side(d, b, scratch)
        if op == COLS and d[KS_CUT] > 0:  # COLS_K_SPLIT, K_SPLIT_COLS: every panel over the side's input channels, no
            # epilogue
            k0 = 0 if side == 0 else d[KS_CUT]
            kk = d[KS_CUT] if side == 0 else k_n - d[KS_CUT]
            wk = numba.carray(_ptr(d[WA] if side == 0 else d[KS_W1]), (d[WA_N] // k_n * kk,), f32)
            zeros = numba.carray(_ptr(d[ZEROS]), (m_n,), f32)
            x = numba.carray(_ptr(d[XA] + 4 * k0 * l_n), (kk * l_n,), f32)
            y = numba.carray(_ptr(d[YA] if side == 0 else d[KS_PART]), (m_n * l_n,), f32)
            cols(wk, kk, m_n, x, l_n, l_n, zeros, y, False, _NEG, _POS, y, l_n, d[KC], scratch, 0, d[b + S_MC])
            if d[KS_UNITS] > 0:
                ksum(d, side)
            return 0
        if op == COLS:
            wp = numba.carray(_ptr(d[WA]), (d[WA_N],), f32)
            bias = numba.carray(_ptr(d[BIAS]), (m_n,), f32)
            n = _image(d, b, side, -1)
            while n >= 0:
                x = numba.carray(_ptr(d[XA] + n * xs), (k_n * l_n,), f32)
                y = numba.carray(_ptr(d[YA] + n * ys), (m_n * l_n,), f32)
                z = numba.carray(_ptr((d[ZA] if has_z else d[YA]) + n * ys), (m_n * l_n,), f32)
                cols(wp, k_n, m_n, x, l_n, l_n, bias, z, has_z, lo, hi, y, l_n, d[KC], scratch, d[b + S_C0],
                     d[b + S_MC])
                p0, np_ = d[b + S_P0], d[b + S_NP]
                if np_ > 0:  # the panel at the cut (COLS_SPLIT): its pixels [p0, p0 + np_), read and written in place
                    q = d[b + S_BLOCK]
                    xq = numba.carray(_ptr(d[XA] + n * xs + 4 * p0), (k_n * l_n - p0,), f32)
                    yq = numba.carray(_ptr(d[YA] + n * ys + 4 * p0), (m_n * l_n - p0,), f32)
                    zq = numba.carray(_ptr((d[ZA] if has_z else d[YA]) + n * ys + 4 * p0), (m_n * l_n - p0,), f32)
                    cols(wp, k_n, m_n, xq, l_n, np_, bias, zq, has_z, lo, hi, yq, l_n, d[KC], scratch, q, q + 1)
                n = _image(d, b, side, n)
            if d[T_N] > 0:  # TAIL: the middle panels' pieces (whole tiles of pixels), claimed one at a time
                pieces, mp = d[T_STEP], d[T_BLOCK]
                tiles = (l_n + mp - 1) // mp
                while True:
                    u = pairs.claim_ends(d, T_CLAIM, side)
                    if u < 0:
                        break
                    q = d[T_START] + u // pieces
                    j = u - (u // pieces) * pieces
                    p0 = (j * tiles // pieces) * mp
                    np_ = min(l_n, ((j + 1) * tiles // pieces) * mp) - p0
                    xq = numba.carray(_ptr(d[XA] + 4 * p0), (k_n * l_n - p0,), f32)
                    yq = numba.carray(_ptr(d[YA] + 4 * p0), (m_n * l_n - p0,), f32)
                    zq = numba.carray(_ptr((d[ZA] if has_z else d[YA]) + 4 * p0), (m_n * l_n - p0,), f32)
                    cols(wp, k_n, m_n, xq, l_n, np_, bias, zq, has_z, lo, hi, yq, l_n, d[KC], scratch, q, q + 1)
            return 0
        if d[KS_CUT] > 0:  # K_SPLIT: every output over the side's input channels, no epilogue (pair_run's _k_sum)
            k0 = 0 if side == 0 else d[KS_CUT]
            kk = d[KS_CUT] if side == 0 else k_n - d[KS_CUT]
            wp = numba.carray(_ptr(d[WA] if side == 0 else d[KS_W1]), (d[WA_N] // k_n * kk,), f32)
            zeros = numba.carray(_ptr(d[ZEROS]), (m_n,), f32)
            x = numba.carray(_ptr(d[XA] + 4 * k0 * l_n), (kk * l_n,), f32)
            y = numba.carray(_ptr(d[YA] if side == 0 else d[KS_PART]), (m_n * l_n,), f32)
            rows(wp, kk, m_n, x, 0, l_n, l_n, zeros, zeros, y, False, _NEG, _POS, y, 0, l_n, d[b + S_BLOCK],
                 d[b + S_GROUPS], d[b + S_KC], d[b + S_PACK] != 0, scratch, 0, d[b + S_TOTAL])
            if d[KS_UNITS] > 0:
                ksum(d, side)
            return 0
        c0, mc = d[b + S_C0], d[b + S_MC]
        wp = numba.carray(_ptr(d[WA] + 4 * c0 * k_n), (mc * k_n,), f32)
        bias = numba.carray(_ptr(d[BIAS] + 4 * c0), (mc,), f32)
        zeros = numba.carray(_ptr(d[ZEROS] + 4 * c0), (mc,), f32)
        p0 = d[b + S_P0]
        n = _image(d, b, side, -1)
        while n >= 0:
            x = numba.carray(_ptr(d[XA] + n * xs), (k_n * l_n,), f32)
            y = numba.carray(_ptr(d[YA] + n * ys + 4 * c0 * l_n), (mc * l_n,), f32)
            z = numba.carray(_ptr((d[ZA] if has_z else d[YA]) + n * ys + 4 * c0 * l_n), (mc * l_n,), f32)
            if mc > 0 and d[b + S_NP] > 0 and d[b + S_PACK] != 0:
                rows(wp, k_n, mc, x, p0, l_n, d[b + S_NP], bias, zeros, z, has_z, lo, hi, y, p0, l_n, d[b + S_BLOCK],
                     d[b + S_GROUPS], d[b + S_KC], True, scratch, 0, d[b + S_TOTAL])
            elif mc > 0 and d[b + S_NP] > 0:  # (ROWS_X_AHEAD: the rows read in place)
                rowsx(wp, k_n, mc, x, p0, l_n, d[b + S_NP], bias, zeros, z, has_z, lo, hi, y, p0, l_n, d[b + S_BLOCK],
                      d[b + S_GROUPS], d[b + S_KC], False, scratch, 0, d[b + S_TOTAL])
            n = _image(d, b, side, n)
        if d[T_N] > 0:  # TAIL: the middle's units, claimed one at a time (one image)
            x = numba.carray(_ptr(d[XA]), (k_n * l_n,), f32)
            step = d[T_STEP]
            while True:
                u = pairs.claim_ends(d, T_CLAIM, side)
                if u < 0:
                    break
                if d[T_AXIS] == T_CHANNELS:
                    c0, mc, p0, np_ = d[T_START] + u * step, step, 0, l_n
                else:
                    c0, mc, p0, np_ = 0, m_n, d[T_START] + u * step, step
                wp = numba.carray(_ptr(d[WA] + 4 * c0 * k_n), (mc * k_n,), f32)
                bias = numba.carray(_ptr(d[BIAS] + 4 * c0), (mc,), f32)
                zeros = numba.carray(_ptr(d[ZEROS] + 4 * c0), (mc,), f32)
                y = numba.carray(_ptr(d[YA] + 4 * c0 * l_n), (mc * l_n,), f32)
                z = numba.carray(_ptr((d[ZA] if has_z else d[YA]) + 4 * c0 * l_n), (mc * l_n,), f32)
                rows(wp, k_n, mc, x, p0, l_n, np_, bias, zeros, z, has_z, lo, hi, y, p0, l_n, d[T_BLOCK], d[T_GROUPS],
                     d[T_KC], d[T_PACK] != 0, scratch, 0, d[T_TOTAL])
        return 0

    key = f"cpair.half.kind{KIND}" + (f".a{ahead}" if ahead else "") + (f".x{xahead}" if xahead else "") + (
        ".w" if whole else "")
    setattr(half, CLOSURE_KEY, key)
    return jit(half)


@jit
def _image(d, b, side, prev):
    """The side's next image after ``prev`` (-1: its first), -1 where none is left: claimed from the shared
    word (DYN: the caller from the front, the helper from the back), else the next of its [N0, N1)."""
    if d[DYN] > 0:
        return pairs.claim_ends(d, CLAIM, side)
    n = d[b + S_N0] if prev < 0 else prev + 1
    return n if n < d[b + S_N1] else -1


@jit
def _lines(a, i0, i1) -> np.float32:
    """The sum of ``a[i]`` for every 16th i in [i0, i1): a load from each cache line of ``a[i0:i1]`` (float32, the
    lines 64 bytes), in order, four sums kept so that the loads do not wait on one another (WARM's pass)."""
    s0 = s1 = s2 = s3 = np.float32(0.0)
    i = i0
    while i + 48 < i1:
        s0 += a[i]
        s1 += a[i + 16]
        s2 += a[i + 32]
        s3 += a[i + 48]
        i += 64
    while i < i1:
        s0 += a[i]
        i += 16
    return (s0 + s1) + (s2 + s3)


_CW = ftile.COLS_WIDTH[KIND]


@jit
def warm_side(d, b, scratch) -> None:
    """WARM's pass at the start of a side's half (``b`` its first descriptor word): bit 1 every line of the input
    (one image), bit 2 those of the residual's rows of the side's output channels (its channel part on the rows tiles,
    its panels and the panel split at the cut on the cols tiles; none on a side cut by pixels); the sum stored into
    the side's scratch (its first float, which its tiles write before they read)."""
    flags, k_n, m_n, l_n = d[XW], d[K], d[M], d[L]
    s = np.float32(0.0)
    if flags & 1:
        s += _lines(numba.carray(_ptr(d[XA]), (k_n * l_n,), np.float32), 0, k_n * l_n)
    if flags & 2 and d[HAS_Z] != 0:
        if d[OP] == COLS:
            q0, q1 = d[b + S_C0], d[b + S_MC]
            if d[b + S_NP] > 0:  # (the panel at the cut)
                q0, q1 = min(q0, d[b + S_BLOCK]), max(q1, d[b + S_BLOCK] + 1)
            c0, c1 = q0 * _CW, min(m_n, q1 * _CW)
        elif d[b + S_NP] >= l_n:
            c0, c1 = d[b + S_C0], d[b + S_C0] + d[b + S_MC]
        else:
            c0 = c1 = 0
        if c1 > c0:
            s += _lines(numba.carray(_ptr(d[ZA]), (m_n * l_n,), np.float32), c0 * l_n, c1 * l_n)
    if scratch.size > 0:
        scratch[0] = s


@functools.cache
def half_address(ahead: int = 0, xahead: int = 0, whole: bool = False) -> int:
    """The C address of the compiled half whose cols tiles prefetch ``ahead`` steps on (their full tiles at
    constant offsets with ``whole``) and whose in-place rows tiles ``xahead`` (compiled or loaded now;
    fpair.half_address's way), 0 where there is none."""
    return pairs.function_address(_build(ahead, xahead, whole))


@jit
def pair_run(ctl, desc, x, y, z, s0, s1) -> int:
    """The caller's side of one layer: the per-call addresses into ``desc`` once it holds the callers'
    slot, then fpair's job (publish, side 0, claim side 1 or wait for the helper's). 1 the helper ran
    the second half, 2 the caller ran both, 3 another caller holds the slot (nothing done)."""
    if not _cas(ctl, SLOT, 0, 1):
        return 3
    desc[XA] = np.int64(x.ctypes.data)
    desc[YA] = np.int64(y.ctypes.data)
    desc[ZA] = np.int64(z.ctypes.data)
    desc[SCR0] = np.int64(s0.ctypes.data)
    desc[SCR1] = np.int64(s1.ctypes.data)
    if desc[DYN] > 0:
        desc[CLAIM] = desc[DYN] << 32  # every image unclaimed (stored before fpair publishes the job)
    if desc[T_N] > 0:
        desc[T_CLAIM] = desc[T_N] << 32  # TAIL: every middle unit unclaimed
    if desc[U_X] != 0 and desc[U_N] > 0:
        desc[U_CLAIM] = desc[U_N] << 32  # SUB_SPLIT: every unit of the copy unclaimed, none done
        desc[U_DONE] = 0
    if desc[KS_CUT] > 0 and desc[KS_UNITS] > 0:  # K_SUM_UNITS: no partial sums done, every unit of the sum unclaimed
        desc[KS_CTL] = np.int64(ctl.ctypes.data)
        desc[KS_DONE] = 0
        desc[KS_CLAIM] = desc[KS_UNITS] << 32
    done = fpair.pair_job(ctl, desc)
    if desc[KS_CUT] > 0 and desc[KS_UNITS] == 0 and done != 3:  # K_SPLIT: the sides' sums and the epilogue (the
        _k_sum(desc)  # node's lock holds the buffer)
    return done


_NEG, _POS = np.float32(-np.inf), np.float32(np.inf)


@jit
def _k_sum(d) -> None:
    """K_SPLIT's end, on the caller after the join: output = clamp(side 0's sums (in the output) + side 1's (the
    layer's buffer) + bias (+ the residual)); a NaN stays."""
    _k_sum_part(d, 0, d[M])


@jit
def _k_sum_shared(d, side) -> None:
    """K_SUM_UNITS: a K-cut side's end, its partial sums done: once both sides' are, the units of the sum (output
    channels) that this side claims (side 0 from the front, side 1 from the back). Side 0 (the caller, which runs it
    first in every job) waits for side 1's sums only where the helper has claimed side 1 (the job's state word no longer
    open) and for K_SUM_WAIT_US at most; else it returns, and side 1 (pair_job's claim then runs it on the caller, or
    the helper runs it) adds every unit left."""
    pairs.count_up(d, KS_DONE)
    if side == 0:
        ctl = numba.carray(_ptr(d[KS_CTL]), (pairs.STATE + 1,), np.int64)
        if (pairs._load(ctl, pairs.STATE) & 3) == pairs.OPEN:
            return
        t0 = _cycles()
        while pairs._load(d, KS_DONE) < 2:  # (K_SUM_WAIT_US at most: past it the wait is pair_job's, the stall rule's)
            if _cycles() - t0 > d[KS_WAIT]:
                return
            pairs._pause()
    pairs.wait_count(d, KS_DONE, 2)
    units, m_n = d[KS_UNITS], d[M]
    while True:
        u = pairs.claim_ends(d, KS_CLAIM, side)
        if u < 0:
            return
        _k_sum_part(d, u * m_n // units, (u + 1) * m_n // units)


@jit
def _k_sum_part(d, c0, c1) -> None:
    """_k_sum over the output channels [c0, c1)."""
    m_n, l_n = d[M], d[L]
    y = numba.carray(_ptr(d[YA]), (m_n * l_n,), np.float32)
    part = numba.carray(_ptr(d[KS_PART]), (m_n * l_n,), np.float32)
    bias = numba.carray(_ptr(d[BIAS]), (m_n,), np.float32)
    fv = numba.carray(_ptr(d[FV]), (2,), np.float32)
    lo, hi = fv[0], fv[1]
    has_z = d[HAS_Z] != 0
    z = numba.carray(_ptr(d[ZA] if has_z else d[YA]), (m_n * l_n,), np.float32)
    for c in range(c0, c1):  # (a row's slices and a loop each way of the residual: vectorized, 5x the scalar loop)
        b = bias[c]
        ys, ps, zs = y[c * l_n:(c + 1) * l_n], part[c * l_n:(c + 1) * l_n], z[c * l_n:(c + 1) * l_n]
        if has_z:
            for i in range(l_n):
                v = ys[i] + ps[i] + b + zs[i]
                v = lo if v < lo else v
                ys[i] = hi if v > hi else v
        else:
            for i in range(l_n):
                v = ys[i] + ps[i] + b
                v = lo if v < lo else v
                ys[i] = hi if v > hi else v


_ready: dict = {}  # (COLS_AHEAD's value, ROWS_X_AHEAD's, COLS_WHOLE's) -> [the half's address] once made ready
_ready_lock = threading.Lock()


def scratch(size: int) -> np.ndarray:
    """The helper side's scratch of at least ``size`` floats (grown at bind, never freed)."""
    return fpair.helper_buffer("cpair.scratch", size)


def server() -> fpair.FPairServer:
    """The helper that runs the conv halves: fpair's, the one for every float32 pair."""
    return fpair.server()


def _warm() -> None:
    """The caller's side compiled through a stand-in call that finds the slot held."""
    held = np.zeros(8, np.int64)
    held[SLOT] = 1
    held[STOP] = 1
    x = config.readonly(np.zeros((1, 1, 1, 1), np.float32))
    s = np.zeros(1, np.float32)
    pair_run(held, np.zeros(NDESC, np.int64), x, np.zeros((1, 1, 1, 1), np.float32), x, s, s)


def prepare(ahead: int = 0, xahead: int = 0, whole: bool = False) -> int:
    """Compile (or load) fpair's sides and this module's half (its cols tiles prefetching ``ahead`` steps on, their
    full tiles at constant offsets with ``whole``, its in-place rows tiles ``xahead``) and caller on the calling
    thread (fpair.prepare_family): the half's address, 0 where there is no pair (no cycle counter, no compiled
    code)."""
    key = (int(ahead), int(xahead), bool(whole))
    with _ready_lock:
        ready = _ready.setdefault(key, [])
    return fpair.prepare_family(ready, _ready_lock, functools.partial(half_address, *key), _warm)


def _setting() -> str:
    return os.environ.get(ENV, "").strip().lower() or "auto"


def enabled() -> bool:
    """Whether conv pairs may be made now: x86-64, spinning threads allowed (``KERNELKIT_NUMBA_SPIN_US``
    not 0), ``KERNELKIT_F32_PAIR`` not off, and the AVX-512 tiles (ftile's kind 2, dwtile)."""
    if not (X86 and shards.spin_seconds() > 0 and _setting() not in ("off", "0", "no")):
        return False
    kind, _forced = ftile.choice()
    return kind == KIND and dwtile.enabled()


def _threads(conv) -> int:
    return conv.threads if conv.threads is not None else config.default_threads()


# the channel cut of each 1x1 layer's output, by (tensor name, channels): the depthwise layer that
# reads it cuts its planes there (each core reads what it wrote)
_cuts: dict = {}


def _default_cut(m_n: int, l_n: int) -> int:
    """The cut of ``m_n`` channels on ``l_n`` pixels where the writer's is unknown: the expansion's rule."""
    width = ftile.COLS_WIDTH[KIND] if l_n <= _cols_max() and m_n % ftile.COLS_LANES[KIND] == 0 else ftile.MR[KIND]
    panels = -(-m_n // width)
    return min(m_n, -(-panels // 2) * width)


def _cols_max() -> int:
    from .conv import FTILE_COLS_MAX

    return FTILE_COLS_MAX


def _names(step, attr: str) -> tuple:
    return tuple(getattr(step, attr, ()) or ())


class Pair:
    """One bound layer's pair: its descriptor (the layer's arrays bound at its first call, the
    per-call addresses written by pair_run), the arrays it points to, the two sides' scratch sizes."""

    __slots__ = ("desc", "keep", "bound", "size0", "size1", "fill", "fn", "entry", "strict", "whole", "rule",
                 "follow", "ahead", "xahead", "cwhole", "solo")

    def __init__(self, desc, size0: int, size1: int, fill, strict: bool = True):
        self.desc, self.size0, self.size1, self.fill = desc, size0, size1, fill
        self.strict = strict  # qpair's stall rule (a batch-1 layer's halves, 15-150 us), else fpair's slack
        self.whole = False  # a stem's pair of whole images (one call a batch), else one call an image
        self.keep: tuple = ()
        self.bound = (None, None)  # the weights (packed for the 1x1 tiles) and bias the descriptor holds
        self.fn = pair_run
        self.entry = True  # the compiled entry point is still to be looked up (after the first call)
        self.follow = None  # FOLLOW's state of a one-image tiles pair: [the cut (float), lowest, highest, units,
        # the setter (cut -> the sides' scratch floats)]
        self.ahead = int(COLS_AHEAD)  # the half's cols prefetch (COLS_AHEAD at bind: every pair of a process the
        # same half where the switch is not changed)
        self.xahead = int(ROWS_X_AHEAD)  # its in-place rows tiles' pixel prefetch (ROWS_X_AHEAD at bind)
        self.cwhole = bool(COLS_WHOLE)  # its cols tiles' full tiles at constant offsets (COLS_WHOLE at bind)
        self.rule = None  # else the stall rule, (strict, hiccup_s) of PairServer.result (rnpair.py's parallel
        # one-image ResNet layers: fpair's slack and the pool's two-stalls rule)
        self.solo = None  # K_SOLO's control words (a job no helper sees), made at its first use

    def __call__(self, w, bias, x, y, z, raw=None) -> bool:
        """_call; where it refuses a pair that cuts its K (K_SPLIT, K_SPLIT_PARALLEL, K_SPLIT_COLS; K_SOLO) or a
        depthwise pair (DW_SOLO), the caller runs both sides (and the sums) itself (``_solo``), so that the output
        is the same whether the helper came."""
        if self._call(w, bias, x, y, z, raw):
            return True
        d = self.desc
        if not d[FN] or not ((K_SOLO and d[KS_CUT] > 0) or (DW_SOLO and d[OP] == DEPTHWISE and d[DWFN] < 6)):
            return False
        return self._solo(w, bias, x, y, z)

    def _solo(self, w, bias, x, y, z) -> bool:
        """K_SOLO, DW_SOLO: both sides of the pair (and a K cut's sums) on the caller, as pair_run runs them where
        the helper does not come, through control words of this pair's own (no helper reads them)."""
        if self.solo is None:
            self.solo = np.zeros(pairs.OWN + 1, np.int64)  # (no cycle stamps: shorter than FINISHED_AT)
        if w is not self.bound[0] or bias is not self.bound[1]:
            self.keep = self.fill(self.desc, w, bias)
            self.bound = (w, bias)
        # side 1's scratch the caller's own, not the helper's (scratch()): a pair refused because another caller holds
        # the slot may have the helper running that caller's side 1 in it now
        self.fn(self.solo, self.desc, x, y, x if z is None else z,  # (pair_run, or its compiled entry point)
                config.thread_buffer("ftile", self.size0, np.float32),
                config.thread_buffer("cpair.solo", self.size1, np.float32))
        return True

    def _call(self, w, bias, x, y, z, raw=None) -> bool:
        """The layer in two halves where the helper spins (else it is woken, and False: the caller's
        one-thread call); False too where another caller holds the slot. ``w``, ``bias``: the bound
        call's constants (by identity: a new pair of them is written into the descriptor). ``raw``: SUB_SPLIT's
        raw input (C-contiguous), which both sides subsample into ``x`` first (where False comes back, ``x`` was
        not written)."""
        if not self.desc[FN]:  # both sides compiled at the first call, not at bind (a tiered start's trial
            address = prepare(self.ahead, self.xahead, self.cwhole)  # compiles them off the model's thread, as the
            # node's kernels)
            if not address:
                return False
            self.desc[FN] = address
        srv = server()
        if not srv.ready and not srv.prepare():  # (a server made since: fpair's sides compiled or loaded)
            return False
        pool = shards.POOL
        if pool.workers_spinning() if self.strict else pool.has_spin_worker():
            return False  # a model with pooled layers (the ResNets): its worker spins through the run; a
            # third spinning thread on two cores would delay its jobs (a batch: a worker at all, conv_serial._pooled)
        if not srv.usable():
            srv.asleep()  # wake it (the thread starts at the first wake): this call runs on the caller
            return False
        if w is not self.bound[0] or bias is not self.bound[1]:
            self.keep = self.fill(self.desc, w, bias)
            self.bound = (w, bias)
        args = (srv.ctl, self.desc, x, y, x if z is None else z, config.thread_buffer("ftile", self.size0, np.float32),
                scratch(self.size1))
        if raw is not None:
            self.desc[U_X] = raw.ctypes.data
        done = self.fn(*args)
        self.desc[U_X] = 0
        if self.entry:  # from the next call on, the entry point of these argument types (qgemm._entry):
            # the serial call passes only these (a read-only C-contiguous 4-D input and residual, a
            # C-contiguous 4-D output, flat float32 scratch)
            from .qgemm import _entry

            self.fn, self.entry = _entry(self.fn, args), False
        if done == 1 and FOLLOW and self.follow is not None:
            follow_cut(self, srv.ctl)
        if done == 1 or done == 2:
            if self.rule is not None:
                srv.result(done, *self.rule)
                return True
            strict = self.strict  # batch 1: qpair's stall rule (STALL_S), not fpair's slack for long halves
            if done == 1 and not strict and IMAGE_STALL and self.desc[DYN] > 0:
                # images claimed one at a time: the caller waits for one image of the helper's at most, so a
                # wait past STALL_S plus one of the caller's own images is a helper that lost its core
                ctl = srv.ctl
                mine = int(self.desc[CLAIM]) & 0xFFFFFFFF  # the images the caller ran (from the front)
                strict = bool(ctl[pairs.WAITED] > srv.stall + ctl[fpair.OWN] // max(mine, 1))
            srv.result(done, strict=strict)  # (a batch otherwise: fpair's slack of half the caller's own)
            return True
        return False


def _start(conv, n_n: int = 1) -> bool:
    """Whether a pair may be bound for ``conv`` of batch ``n_n`` (its session's threads: 2+ at batch 1,
    exactly 2 for a batch (``BATCH``); the switches, a cycle counter)."""
    threads = _threads(conv)
    if n_n > 1 and not (BATCH and threads == 2):
        return False
    return threads >= 2 and enabled() and cycle_rate() > 0


def by_images(n_n: int) -> bool:
    """Whether a batch of ``n_n`` images pairs as image halves (``BATCH_AXIS``), not channel halves."""
    if n_n < 2:
        return False
    return BATCH_AXIS == "images" or (BATCH_AXIS == "auto" and n_n % 2 == 0)


def _images(desc, n_n: int, images: bool) -> None:
    """Each side's images: halves of the batch (claimed one at a time where DYNAMIC), or every image."""
    desc[DYN] = n_n if images and DYNAMIC else 0
    h = (n_n + 1) // 2 if images else n_n
    desc[SIDE0 + S_N0], desc[SIDE0 + S_N1] = 0, h
    desc[SIDE0 + SIDE_N + S_N0], desc[SIDE0 + SIDE_N + S_N1] = (h, n_n) if images else (0, n_n)


def _clamp(lo, hi) -> np.ndarray:
    return np.array([lo, hi], np.float32)


def cols_split(m_n: int, l_n: int, mp: int | None = None) -> tuple[int, int]:
    """COLS_SPLIT's cut of ``m_n`` channels (cols panels of COLS_WIDTH) on ``l_n`` pixels: (q, a), the caller
    running panels [0, q) and pixels [0, a) of panel q (whole tiles of ``mp`` pixels, COLS_MP unless given),
    the helper the rest of panel q and the panels after it; a == 0: no panel split."""
    width, mp = ftile.COLS_WIDTH[KIND], mp or ftile.COLS_MP[KIND]
    half = m_n / 2
    q = int(half // width)
    rest = half - q * width  # the caller's channels of panel q
    tiles = -(-l_n // mp)
    valid = min(width, m_n - q * width)
    a = min(l_n, int(round(rest / valid * tiles)) * mp) if valid > 0 else 0
    if a >= l_n:
        return q + 1, 0
    return q, a


def tiles_pair(conv, step, cols: bool, y_shape, k_n: int, l_n: int, lo, hi, has_z: bool, split: bool = False,
               sub: bool = False):
    """The pair of a bound 1x1 stride-1 layer on ftile's rows (or cols) tiles of KIND, or None. ``split``: a
    one-image layer's cols panels cut by COLS_SPLIT's rule (the bound parallel call's). ``sub``: the tiles read a 1x1
    strided layer's subsampled input (SUB_OWN cuts such a one-image layer of the bound parallel call by pixels)."""
    n_n, m_n = y_shape[:2]
    if not PAIR_POINTWISE or 2.0 * n_n * m_n * k_n * l_n < MIN_US * FLOPS_PER_US:
        return None
    if not cols and ftile.rows_kind(KIND, m_n) != KIND:
        return None
    if not _start(conv, n_n):
        return None
    images = by_images(n_n)
    desc = np.zeros(NDESC, np.int64)
    fv = _clamp(lo, hi)
    desc[OP], desc[HAS_Z], desc[FV], desc[K], desc[M], desc[L] = COLS if cols else ROWS, int(has_z), fv.ctypes.data, \
        k_n, m_n, l_n
    kcut = 0  # K_SPLIT's (K_SPLIT_COLS') cut of the input channels
    s0 = SIDE0
    s1 = SIDE0 + SIDE_N
    if cols:
        width = ftile.COLS_WIDTH[KIND]
        panels = -(-m_n // width)
        if panels < 2 and not images:
            return None
        cut = panels if images else -(-panels // 2)
        size = ftile.scratch_size(KIND, True, l_n)
        desc[KC] = cols_kc(l_n)
        desc[s0 + S_C0], desc[s0 + S_MC], desc[s1 + S_C0], desc[s1 + S_MC] = 0, cut, (0 if images else cut), panels
        if (split or SPLIT_SERIAL or l_n > _cols_max()) and COLS_SPLIT and not images and n_n == 1:
            q, a = cols_split(m_n, l_n)
            cut = q + int(a > 0)  # (the channel cut below: the split panel counts as the caller's)
            desc[s0 + S_MC], desc[s1 + S_C0] = q, cut
            if a:
                desc[s0 + S_BLOCK], desc[s0 + S_P0], desc[s0 + S_NP] = q, 0, a
                desc[s1 + S_BLOCK], desc[s1 + S_P0], desc[s1 + S_NP] = q, a, l_n - a
        if not images and _k_cuttable(n_n, m_n, k_n, l_n,
                                      (K_SPLIT_PARALLEL if COLS_K_SPLIT else 0) if split else K_SPLIT_COLS):
            kcut = _k_cut(step, k_n)  # (COLS_K_SPLIT: the bound parallel call's; K_SPLIT_COLS: the serial pairs')
        if kcut:  # each side every panel over its part of K
            desc[s0 + S_C0], desc[s0 + S_MC], desc[s1 + S_C0], desc[s1 + S_MC] = 0, panels, 0, panels
            desc[s0 + S_NP] = desc[s1 + S_NP] = 0
            desc[KS_CUT] = kcut
            cut = panels
        tail = split and TAIL and not images and not kcut and n_n == 1 and _tail_cols(desc, m_n, l_n, panels)
        desc[s0 + S_SCR_N] = desc[s1 + S_SCR_N] = size
        sizes = (size, size)
        channel_cut = None if images or kcut else min(m_n, cut * width)
    else:
        mr, nr = ftile.MR[KIND], ftile.NR[KIND]
        panels = -(-m_n // mr)
        tiles = -(-l_n // nr)
        axis = AXIS
        if axis == "auto":
            if m_n > k_n:
                axis = "pixels" if split and n_n == 1 and EXPAND_PIXELS and l_n >= EXPAND_PIXELS else "channels"
            elif tiles >= PIXEL_TILES:
                axis = "pixels"
            else:
                axis = "channels" if panels % 2 == 0 or tiles < 2 else "pixels"
        if sub and split and SUB_SPLIT and SUB_OWN and n_n == 1 and not TAIL:
            axis = "pixels"  # (SUB_OWN: each side copies and reads its own pixels)
        if not images and _k_cuttable(n_n, m_n, k_n, l_n, K_SPLIT_PARALLEL if split else K_SPLIT):
            kcut = _k_cut(step, k_n)
        if images or kcut:
            parts = ((0, m_n, 0, l_n), (0, m_n, 0, l_n))
            channel_cut = None
        elif axis == "channels" and panels >= 2:
            c = -(-panels // 2) * mr
            parts = ((0, c, 0, l_n), (c, m_n - c, 0, l_n))
            channel_cut = c
        elif tiles >= 2:
            p = -(-tiles // 2) * nr
            if PIXEL_EVEN and not split:  # the tile boundary nearest the middle pixel
                p = min((tiles - 1) * nr, max(nr, int(round(l_n / (2 * nr))) * nr))
            parts = ((0, m_n, 0, p), (0, m_n, p, l_n - p))
            channel_cut = None
        else:
            return None
        tail = split and TAIL and not images and not kcut and n_n == 1 and \
            _tail_rows(desc, parts, k_n, m_n, l_n, mr, nr)  # (K_SPLIT_PARALLEL's cut has no middle)
        if tail:
            parts = tail
        if kcut:  # each side every output over its part of K: a plan of its own K
            sizes = []
            for base, kk in ((SIDE0, kcut), (SIDE0 + SIDE_N, k_n - kcut)):
                block, blocks, groups, kc, pack, size = _rows_plan(m_n, kk, l_n)
                desc[base:base + SIDE_N][:10] = (0, m_n, 0, l_n, block, groups, kc, int(pack), blocks * groups, size)
                sizes.append(size)
            desc[KS_CUT] = kcut
        else:
            sizes = _rows_sides(desc, parts, k_n)
        if tail:
            sizes = [max(size, int(desc[T_SCR])) for size in sizes]  # (a unit's scratch floats)
            desc[SIDE0 + S_SCR_N], desc[SIDE0 + SIDE_N + S_SCR_N] = sizes
    _images(desc, n_n, images)
    if split and WARM and n_n == 1 and not images and not kcut and m_n > k_n and l_n <= WARM_MAX:
        desc[XW] = int(WARM)
    follow = None
    if n_n == 1 and not tail and not kcut:
        if cols:
            tiles = -(-l_n // ftile.COLS_MP[KIND])
            q0 = int(desc[s1 + S_C0]) - int(desc[s0 + S_NP] > 0)
            follow = (panels * tiles, q0 * tiles + -(-int(desc[s0 + S_NP]) // ftile.COLS_MP[KIND]),
                      functools.partial(_set_cols, desc, panels, tiles, l_n, size))
        elif channel_cut is not None:
            follow = (panels, channel_cut // mr, functools.partial(_set_rows, desc, k_n, m_n, l_n, mr, True, {}))
        else:
            follow = (tiles, int(desc[s1 + S_P0]) // nr, functools.partial(_set_rows, desc, k_n, m_n, l_n, nr, False,
                                                                           {}))
    out = _names(step, "outputs")
    if channel_cut is not None and out:
        _cuts[(out[0], m_n)] = channel_cut
    zeros = conv._zeros(m_n, np.float32)
    scratch(sizes[1])
    part = config.aligned_empty(m_n * l_n, np.float32, config.BUFFER_ALIGN) if kcut else None
    if kcut:
        desc[KS_PART] = part.ctypes.data
        desc[KS_UNITS] = min(max(int(K_SUM_UNITS), 0), m_n)  # (K_SUM_UNITS: the sum's units, each a channel at least)
        desc[KS_WAIT] = int(K_SUM_WAIT_US * 1e-6 * cycle_rate())

    def fill(d, packed, bias):
        packed = np.ascontiguousarray(packed, np.float32)
        bias = np.ascontiguousarray(bias, np.float32)
        d[WA], d[WA_N], d[BIAS], d[ZEROS] = packed.ctypes.data, packed.size, bias.ctypes.data, zeros.ctypes.data
        if not kcut:
            return packed, bias, zeros, fv
        # K_SPLIT: each side's panels of its input channels ([panel][k][r], packed's layout cut along k; the cols
        # panels the same with COLS_WIDTH rows)
        width_ = ftile.COLS_WIDTH[KIND] if cols else ftile.MR[KIND]
        panels = packed.size // (k_n * width_)
        p3 = packed.reshape(panels, k_n, width_)
        w0, w1 = (_aligned(p3[:, k0:k1, :]) for k0, k1 in ((0, kcut), (kcut, k_n)))
        d[WA], d[KS_W1] = w0.ctypes.data, w1.ctypes.data
        return packed, bias, zeros, fv, w0, w1, part

    pair = Pair(desc, sizes[0], sizes[1], fill, strict=n_n == 1)
    pair.keep = (fv,)
    if follow is not None and follow[0] >= 2:
        nt, cut, setter = follow
        span = FOLLOW_RANGE * nt
        pair.follow = [float(cut), max(1, int(round(cut - span))), min(nt - 1, int(round(cut + span))), nt, setter]
    return pair


def _k_cuttable(n_n: int, m_n: int, k_n: int, l_n: int, limit: int) -> bool:
    """Whether a K cut may take a layer of ``n_n`` images, ``k_n`` -> ``m_n`` channels on ``l_n`` pixels: a one-image
    projection (fewer output than input channels, K_SPLIT_MIN_K of them at least) on at most ``limit`` pixels (the
    switch of its tiles and thread count: K_SPLIT, K_SPLIT_PARALLEL, K_SPLIT_COLS; 0: none)."""
    return n_n == 1 and m_n < k_n and k_n >= K_SPLIT_MIN_K and l_n <= limit


def _k_cut(step, k_n: int) -> int:
    """K_SPLIT's cut of a projection's ``k_n`` input channels: where the layer that wrote its input cut its channels
    (_cuts: the depthwise layer's planes), else the middle rounded to 16; 0 where that leaves a side none."""
    ins = _names(step, "inputs")
    cut = _cuts.get((ins[0], k_n)) if ins else None
    if cut is None:
        cut = max(16, (k_n // 2 + 8) // 16 * 16)
    return cut if 0 < cut < k_n else 0


def _aligned(a) -> np.ndarray:
    """A flat float32 copy of ``a`` starting on ftile.PACK_ALIGN bytes (the packed weights' alignment)."""
    out = config.aligned_empty(a.size, np.float32, ftile.PACK_ALIGN)
    out.reshape(a.shape)[...] = a
    return out


def _tail_split(units: int) -> tuple[int, int, int] | None:
    """TAIL's middle of ``units`` (the layer's panels or tiles): (the caller's bulk in units, the middle's claims,
    the units a claim), the middle about TAIL_SHARE of them, centred, in at most TAIL_UNITS claims of equal units;
    None where a side's bulk or the middle would be empty."""
    mid = max(2, int(round(TAIL_SHARE * units)))
    step = max(1, -(-mid // max(TAIL_UNITS, 1)))
    claims = mid // step
    mid = claims * step
    a = (units - mid) // 2
    if claims < 2 or a < 1 or units - a - mid < 1:
        return None
    return a, claims, step


def _tail_rows(desc, parts, k_n: int, m_n: int, l_n: int, mr: int, nr: int):
    """TAIL on a one-image rows-tiles pair: the middle's words in ``desc`` (its units: weight panels where ``parts``
    cut the channels, else pixel tiles) and the sides' bulk parts (first channel, channels, first pixel, pixels), or
    None (too few units: the halves as bound)."""
    channels = parts[1][0] > 0
    units = -(-m_n // mr) if channels else -(-l_n // nr)
    split = _tail_split(units)
    if split is None:
        return None
    a, claims, step = split
    unit = mr if channels else nr
    start, size, end = a * unit, step * unit, (a + claims * step) * unit
    if channels:
        parts = ((0, start, 0, l_n), (end, m_n - end, 0, l_n))
        block, blocks, groups, kc, pack, scr = _rows_plan(size, k_n, l_n)
    else:
        parts = ((0, m_n, 0, start), (0, m_n, end, l_n - end))
        block, blocks, groups, kc, pack, scr = _rows_plan(m_n, k_n, size)
    desc[T_N], desc[T_AXIS], desc[T_START], desc[T_STEP] = claims, T_CHANNELS if channels else T_PIXELS, start, size
    desc[T_BLOCK], desc[T_GROUPS], desc[T_KC], desc[T_PACK], desc[T_TOTAL] = block, groups, kc, int(pack), \
        blocks * groups
    desc[T_SCR] = scr
    return parts


def _tail_cols(desc, m_n: int, l_n: int, panels: int) -> bool:
    """TAIL on a one-image cols-tiles pair: whole panels a side's bulk (no panel split), the middle's panels in pieces
    of whole tiles of pixels (at most TAIL_UNITS claims); False (the halves as bound) where the panels are too few."""
    mid = max(1, int(round(TAIL_SHARE * panels)))
    a = (panels - mid) // 2
    if a < 1 or panels - a - mid < 1:
        return False
    mp = ftile.COLS_MP[KIND]
    tiles = -(-l_n // mp)
    pieces = max(1, min(tiles, TAIL_UNITS // mid))
    if mid * pieces < 2:
        return False
    s0, s1 = SIDE0, SIDE0 + SIDE_N
    desc[s0 + S_C0], desc[s0 + S_MC], desc[s0 + S_NP] = 0, a, 0
    desc[s1 + S_C0], desc[s1 + S_MC], desc[s1 + S_NP] = a + mid, panels, 0
    desc[T_N], desc[T_AXIS], desc[T_START], desc[T_STEP], desc[T_BLOCK] = mid * pieces, T_COLS, a, pieces, mp
    return True


def _rows_plan(mc: int, k_n: int, np_: int) -> tuple:
    """A one-thread rows-tiles plan of ``mc`` channels by ``np_`` pixels (K ``k_n``): (block, blocks, groups, K
    chunk, whether the pixels are packed, the scratch floats)."""
    block, blocks, groups, kc = ftile.plan(KIND, mc, k_n, np_, 1)
    pack = ftile.pack_rows(mc, k_n, np_)
    return block, blocks, groups, kc, pack, ftile.scratch_size(KIND, False, np_, block, kc, pack)


def _rows_sides(desc, parts, k_n: int) -> list:
    """The rows tiles' two sides in ``desc``: per side (first channel, channels, first pixel, pixels) in ``parts``,
    each side a one-thread plan of its part; the sides' scratch floats."""
    sizes = []
    for base, (c0, mc, p0, np_) in zip((SIDE0, SIDE0 + SIDE_N), parts):
        block, blocks, groups, kc, pack, size = _rows_plan(mc, k_n, np_)
        desc[base:base + SIDE_N][:10] = (c0, mc, p0, np_, block, groups, kc, int(pack), blocks * groups, size)
        sizes.append(size)
    return sizes


def _set_rows(desc, k_n: int, m_n: int, l_n: int, unit: int, channels: bool, made: dict, cut: int) -> tuple:
    """FOLLOW's setter of a rows-tiles pair: the caller's first ``cut`` weight panels (``channels``; ``unit`` MR
    channels) or pixel tiles (``unit`` NR pixels), the helper the rest; the sides' scratch floats. ``made``: the
    sides' words by cut (a plan made once a cut)."""
    hit = made.get(cut)
    if hit is None:
        e = min(cut * unit, m_n if channels else l_n)
        parts = ((0, e, 0, l_n), (e, m_n - e, 0, l_n)) if channels else ((0, m_n, 0, e), (0, m_n, e, l_n - e))
        sizes = _rows_sides(desc, parts, k_n)
        hit = made[cut] = (desc[SIDE0:SIDE0 + 2 * SIDE_N].copy(), tuple(sizes))
    desc[SIDE0:SIDE0 + 2 * SIDE_N] = hit[0]
    return hit[1]


def _set_cols(desc, panels: int, tiles: int, l_n: int, size: int, cut: int) -> tuple:
    """FOLLOW's setter of a one-image cols-tiles pair: the caller's first ``cut`` (panel, pixel tile) steps, i.e.
    panels [0, q) and pixels [0, a) of panel q (COLS_SPLIT's split), the helper the rest; the sides' scratch floats
    (the cols tiles' scratch does not depend on the part)."""
    q, r = divmod(cut, tiles)
    a = r * ftile.COLS_MP[KIND]  # (< l_n: r < tiles)
    s0, s1 = SIDE0, SIDE0 + SIDE_N
    desc[s0 + S_C0], desc[s0 + S_MC], desc[s1 + S_C0], desc[s1 + S_MC] = 0, q, q + int(a > 0), panels
    if a:
        desc[s0 + S_BLOCK], desc[s0 + S_P0], desc[s0 + S_NP] = q, 0, a
        desc[s1 + S_BLOCK], desc[s1 + S_P0], desc[s1 + S_NP] = q, a, l_n - a
    else:
        desc[s0 + S_NP] = desc[s1 + S_NP] = 0
    return size, size


def set_cut(pair: Pair, cut: int) -> None:
    """A one-image tiles pair's cut at ``cut`` of its FOLLOW units (the sides' scratch grown where needed)."""
    size0, size1 = pair.follow[4](cut)
    pair.size0, pair.size1 = max(pair.size0, size0), max(pair.size1, size1)


def follow_cut(pair: Pair, ctl) -> int:
    """FOLLOW: move ``pair``'s cut toward the one at which the paired call just made would have ended on both sides at
    once, from fpair's cycle stamps in ``ctl`` (``follow_step``); the cut now (in its units)."""
    cut, now = follow_step(pair.follow, ctl)
    if now != cut:
        set_cut(pair, now)
    return now


def follow_step(f: list, ctl, gain: float | None = None, step: float | None = None) -> tuple[int, int]:
    """FOLLOW's rule on the state ``f`` = [the cut (float), its least, its most, the units, ...] from the last paired
    call's cycle stamps in ``ctl``: (the cut before, the cut now). ``gain``, ``step``: FOLLOW_GAIN and FOLLOW_STEP
    unless given (rnpair.rebalance passes rnpair's, for the F(4x4) layers' cut)."""
    gain = FOLLOW_GAIN if gain is None else gain
    step = FOLLOW_STEP if step is None else step
    nt = f[3]
    cut = min(max(int(round(f[0])), f[1]), f[2])
    own, start = int(ctl[fpair.OWN]), int(ctl[pairs.CLAIMED_AT] - ctl[pairs.PUBLISHED])
    helper = int(ctl[pairs.FINISHED_AT] - ctl[pairs.CLAIMED_AT])
    if own <= 0 or helper <= 0 or start < 0 or start >= own:
        return cut, cut
    tau = (own + helper) / nt  # cycles a unit, a side's fixed cost included (the moves the smaller)
    late = start + helper - own  # > 0: the helper ended last, the caller takes more units
    if abs(late) <= tau:
        return cut, cut
    most = max(1.0, step * nt)
    f[0] = min(max(f[0] + min(max(gain * late / (2 * tau), -most), most), f[1]), f[2])
    return cut, min(max(int(round(f[0])), f[1]), f[2])


def implicit_pair(conv, step, y_shape, k_n: int, xpp, koff, row_step: int, lo, hi, has_z: bool, x_shape=None,
                  phases=None):
    """The pair of a bound strided convolution on ftile's implicit GEMM (MobileNetV2's 3x3/2 stem) by
    output channels, or None. ``xpp``: the call's padded phases buffer (the caller fills it before the
    halves), ``koff``: the offset table. One image a call (a batch: the caller passes each image's
    output), or for a batch by images (``by_images``, with ``x_shape`` and ``phases`` = (stride, pad
    top, pad left, padded rows, columns a phase)) one call a batch, each side filling its images'
    phases into its own scratch (``Pair.whole``)."""
    n_n, m_n, oh_n, ow_n = y_shape
    l_n = oh_n * ow_n
    mr = ftile.MR[KIND]
    panels = -(-m_n // mr)
    whole = by_images(n_n) and IMPLICIT_IMAGES and x_shape is not None and phases is not None
    if not PAIR_IMPLICIT or (panels < 2 and not whole) or 2.0 * m_n * k_n * l_n < MIN_US * FLOPS_PER_US:
        return None
    if xpp.dtype != np.float32 or not xpp.flags.c_contiguous or koff.dtype != np.int64 or koff.size != k_n:
        return None
    if not _start(conv, n_n):
        return None
    c = -(-panels // 2) * mr
    desc = np.zeros(NDESC, np.int64)
    fv = _clamp(lo, hi)
    koff = np.ascontiguousarray(koff)
    desc[OP], desc[HAS_Z], desc[FV], desc[K], desc[M], desc[L] = IMPLICIT, int(has_z), fv.ctypes.data, k_n, m_n, l_n
    desc[XPP], desc[XPP_N], desc[KOFF] = xpp.ctypes.data, xpp.size, koff.ctypes.data
    desc[BAND], desc[OW], desc[OH] = row_step, ow_n, oh_n
    desc[SIDE0 + S_C0], desc[SIDE0 + S_MC] = 0, c
    desc[SIDE0 + SIDE_N + S_C0], desc[SIDE0 + SIDE_N + S_MC] = c, m_n - c
    desc[SIDE0 + S_SCR_N] = desc[SIDE0 + SIDE_N + S_SCR_N] = 1
    _images(desc, 1, False)
    size = 1
    if whole:
        desc[IMGS], desc[C], desc[H], desc[W] = 1, *x_shape[1:]
        desc[STRIDE], desc[PH], desc[PL], desc[HP], desc[QP] = phases
        size = xpp.size
        desc[SIDE0 + S_SCR_N] = desc[SIDE0 + SIDE_N + S_SCR_N] = size
        _images(desc, n_n, True)
        scratch(size)
    out = _names(step, "outputs")
    if out and not whole:
        _cuts[(out[0], m_n)] = c

    def fill(d, packed, bias):
        packed = np.ascontiguousarray(packed, np.float32)
        bias = np.ascontiguousarray(bias, np.float32)
        d[WA], d[WA_N], d[BIAS] = packed.ctypes.data, packed.size, bias.ctypes.data
        return packed, bias, fv, xpp, koff

    pair = Pair(desc, size, size, fill, strict=n_n == 1)
    pair.whole = whole
    pair.keep = (fv, xpp, koff)
    return pair


# A one-image float32 MaxPool 3x3 on dwtile's tiles in a two-thread session (ResNet's 3x3/2 after the stem, 64
# planes of 112x112; serial below dwtile's PARALLEL_US: 0.45 ms at two threads on the Xeon, 0.85 of its
# one-thread time) runs as two halves of its planes on the helper (maxpool_pair; kernels/pool.py). Issue 11,
# session 12 (r50t12). False: the planes on the calling thread.
PAIR_MAXPOOL = True
_NO_WEIGHT = np.zeros(1, np.float32)


def maxpool_pair(kernel, y_shape, x_shape, stride: int, ph: int, pw: int):
    """The pair of a bound one-image MaxPool 3x3 (stride 1 or 2) on dwtile's max planes, by halves of the planes
    (the depthwise op with DWFN max1 / max2; called with no weight: ``pair(None, None, x, y, None)``), or None."""
    n_n, m_n, oh_n, ow_n = y_shape
    c_n, h_n, w_n = x_shape[1:]
    if not (PAIR_MAXPOOL and n_n == 1 and m_n == c_n and m_n >= 2 and stride in (1, 2)):
        return None
    if not _start(kernel, 1):
        return None
    desc = np.zeros(NDESC, np.int64)
    fv = _clamp(0.0, 0.0)
    desc[OP], desc[HAS_Z], desc[FV] = DEPTHWISE, 0, fv.ctypes.data
    desc[C], desc[H], desc[W], desc[M], desc[OH], desc[OW] = c_n, h_n, w_n, m_n, oh_n, ow_n
    desc[PH], desc[PW], desc[BAND], desc[DWFN] = ph, pw, dwtile.band_rows(w_n, stride), 6 + (stride == 2)
    cut = m_n // 2
    desc[SIDE0 + S_C0], desc[SIDE0 + S_MC] = 0, cut
    desc[SIDE0 + SIDE_N + S_C0], desc[SIDE0 + SIDE_N + S_MC] = cut, m_n
    desc[SIDE0 + S_SCR_N] = desc[SIDE0 + SIDE_N + S_SCR_N] = 1
    _images(desc, 1, False)

    def fill(d, _w, _bias):
        d[WA], d[WA_N], d[BIAS] = _NO_WEIGHT.ctypes.data, 1, _NO_WEIGHT.ctypes.data
        return fv, _NO_WEIGHT

    fill(desc, None, None)  # (the calls pass no weight: Pair's bound (None, None) never calls it again)
    pair = Pair(desc, 1, 1, fill, strict=True)
    pair.keep = (fv,)
    return pair


def depthwise_pair(conv, step, y_shape, x_shape, stride: int, ph: int, pw: int, lo, hi, has_z: bool):
    """The pair of a bound depthwise 3x3 layer on dwtile's planes, or None."""
    n_n, m_n, oh_n, ow_n = y_shape
    c_n, h_n, w_n = x_shape[1:]
    if not PAIR_DEPTHWISE or m_n != c_n or m_n < 2:
        return None
    if dwtile.cost_us("conv", stride, n_n * m_n, n_n * m_n * oh_n * ow_n) < MIN_US:
        return None
    if not _start(conv, n_n):
        return None
    images = by_images(n_n)
    ins = _names(step, "inputs")
    cut = _cuts.get((ins[0], m_n)) if ins else None
    if cut is None:
        cut = _default_cut(m_n, h_n * w_n)
    if images:
        cut = m_n
    elif not 0 < cut < m_n:
        return None
    if stride == 1:
        fn = 0
    elif ow_n <= dwtile.PAIRS_MAX_W:
        fn = 4
    else:
        fn = 2
    fn += int(has_z)
    desc = np.zeros(NDESC, np.int64)
    fv = _clamp(lo, hi)
    desc[OP], desc[HAS_Z], desc[FV] = DEPTHWISE, int(has_z), fv.ctypes.data
    desc[C], desc[H], desc[W], desc[M], desc[OH], desc[OW] = c_n, h_n, w_n, m_n, oh_n, ow_n
    desc[PH], desc[PW], desc[BAND], desc[DWFN] = ph, pw, dwtile.band_rows(w_n, stride), fn
    desc[SIDE0 + S_C0], desc[SIDE0 + S_MC] = 0, cut
    desc[SIDE0 + SIDE_N + S_C0], desc[SIDE0 + SIDE_N + S_MC] = (0 if images else cut), m_n
    desc[SIDE0 + S_SCR_N] = desc[SIDE0 + SIDE_N + S_SCR_N] = 1
    _images(desc, n_n, images)

    def fill(d, w, bias):
        w = np.ascontiguousarray(w, np.float32)
        bias = np.ascontiguousarray(bias, np.float32)
        d[WA], d[WA_N], d[BIAS] = w.ctypes.data, w.size, bias.ctypes.data
        return w, bias, fv

    out = _names(step, "outputs")
    if out and not images:  # (K_SPLIT: the projection after it cuts its input channels here)
        _cuts[(out[0], m_n)] = cut
    pair = Pair(desc, 1, 1, fill, strict=n_n == 1)
    pair.keep = (fv,)
    return pair
