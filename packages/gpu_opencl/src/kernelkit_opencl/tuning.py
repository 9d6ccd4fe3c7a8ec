"""Tuned kernel parameters: a shipped table per known device, else searched once and persisted.

Like MACE's tuned-parameter file: ``<cache>/opencl/tuned_params.json`` maps
``"<device identity>|<kernel>|<shape class>"`` to the chosen parameters. Where it has no entry,
the tables shipped in ``tuned/*.json`` beside this module are asked next (CLBlast's database idea:
``{"device": <OpenCL device name>, "entries": {"<kernel>|<shape class>": params}}``, written by
:func:`export_table` from a tuned cache), so a known device skips the search; then, if tuning is
on for the device, :func:`choose` times the candidates (bounded: two runs each after a warm-up,
a candidate more than twice as slow as the best so far dropped after one, a time budget per
search, ``KERNELKIT_OPENCL_TUNE_BUDGET`` seconds; a tile the same kernel kind already uses wins
within ``KERNELKIT_OPENCL_TUNE_SHARE`` of the best, default 3 %: fewer programs) and persists the
winner; later sessions and processes read the file. Candidates are ranked by the kernels' device
time where ``run`` returns it (OpenCL profiling events: ``OpenCLDevice.time_launches``), else by
host wall time. Updates merge under a file lock and are written atomically; an unreadable file is
ignored with a warning and rewritten, and an entry that is not one of the kernel's candidates
(``TM: 0``, a missing key) is discarded and re-tuned. ``KERNELKIT_OPENCL_TUNED_TABLES=0`` ignores
the shipped tables.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
import warnings
from pathlib import Path

from kernelkit import progress
from kernelkit.errors import brief

from .programs import atomic_write, cache_root

log = logging.getLogger("kernelkit.opencl.tuning")

TABLE_DIR = Path(__file__).parent / "tuned"
ENV_TABLES = "KERNELKIT_OPENCL_TUNED_TABLES"
ENV_BUDGET = "KERNELKIT_OPENCL_TUNE_BUDGET"  # seconds per search (table generation: larger)
SEARCH_BUDGET_S = 3.0  # timing (not building) per search; the best so far wins when it runs out
SHARE_TOLERANCE = 0.03  # a tile already chosen for this kernel kind wins if within 3 % of the best
ENV_SHARE = "KERNELKIT_OPENCL_TUNE_SHARE"  # that tolerance (table generation: larger, fewer programs)
_chosen: dict[str, list[dict]] = {}  # kernel kind (key without the shape) -> tiles chosen so far
_tables: dict[str, dict] | None = None

_lock = threading.Lock()
_memory: dict[str, dict] = {}
_loaded_from: str | None = None
searches = 0  # searches run in this process (for tests and reports)
search_seconds = 0.0  # time spent in them (builds included)


def path():
    return cache_root() / "opencl" / "tuned_params.json"


def _read() -> dict:
    p = path()
    try:
        data = json.loads(p.read_text())
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return data
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        msg = f"tuned-parameter file {p} is unreadable ({exc}); it will be rewritten"
        log.warning(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)
        return {}


def lookup(key: str) -> dict | None:
    global _loaded_from
    with _lock:
        where = str(path())
        if _loaded_from != where:
            _memory.clear()
            _memory.update(_read())
            _loaded_from = where
        return _memory.get(key)


def store(key: str, params: dict) -> None:
    from filelock import FileLock

    p = path()
    with _lock:
        _memory[key] = params
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(str(p) + ".lock"):
                data = _read()
                data[key] = params
                atomic_write(p, json.dumps(data, indent=1, sort_keys=True).encode())
        except OSError as exc:
            log.warning("cannot write tuned parameters to %s: %s", p, exc)


def shipped(device_name: str) -> dict:
    """The shipped entries for ``device_name`` (``{}`` for a device no table knows)."""
    global _tables
    if os.environ.get(ENV_TABLES, "1").lower() in ("0", "off", "false", "no"):
        return {}
    with _lock:
        if _tables is None:
            _tables = {}
            for f in sorted(TABLE_DIR.glob("*.json")):
                try:
                    data = json.loads(f.read_text())
                    _tables.setdefault(str(data["device"]), {}).update(dict(data["entries"]))
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    log.warning("shipped tuning table %s is unreadable: %s", f, exc)
        return _tables.get(device_name, {})


def export_table(device_name: str, identity: str, dst: Path) -> int:
    """Write this cache's tuned entries of the device ``identity`` as a shipped table for
    ``device_name`` (merged with the table already at ``dst``); returns the number of entries."""
    prefix = identity + "|"
    entries = {k[len(prefix):]: v for k, v in _read().items() if k.startswith(prefix)}
    try:
        old = json.loads(Path(dst).read_text())
        if old.get("device") == device_name:
            entries = {**old.get("entries", {}), **entries}
    except (OSError, ValueError, AttributeError):
        pass
    data = {"device": device_name, "entries": dict(sorted(entries.items()))}
    atomic_write(Path(dst), json.dumps(data, indent=1).encode() + b"\n")
    return len(entries)


def valid(params, candidates: list[dict]) -> bool:
    """A stored entry is used only if it is one of today's candidates (a hand-edited or stale
    file cannot inject arbitrary defines into a build)."""
    return isinstance(params, dict) and params in candidates


def prebuild(build, candidates: list[dict]) -> None:
    """``build(params)`` for every candidate on a thread pool: OpenCL compilers release the GIL,
    so a search's programs compile in parallel (cold start). Failures surface later, in ``run``."""
    from concurrent.futures import ThreadPoolExecutor

    workers = min(len(candidates), os.cpu_count() or 1, 16)
    if workers <= 1:
        return
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kernelkit-build") as pool:
        for fut in [pool.submit(build, p) for p in candidates]:
            try:
                fut.result()
            except Exception as exc:  # noqa: BLE001 - the candidate is rejected by run() later
                log.debug("prebuild failed: %s", exc)


def choose(key: str, candidates: list[dict], run, enabled: bool, repeats: int = 2, build=None,
           table: tuple[str, str] | None = None, allowed: list[dict] | None = None) -> dict:
    """The parameters for ``key``: from the file if present (and still a candidate); else from the
    shipped table of ``table = (device name, key without the device identity)``; else, when
    ``enabled``, the fastest of ``candidates`` (``run(params)`` enqueues once and waits; it may
    raise to reject a candidate; ``build(params)``, if given, compiles one ahead, all in
    parallel), persisted; else the first candidate (the default for the device). A stored or
    shipped entry must be one of ``allowed`` (default: the candidates)."""
    global searches, search_seconds
    allowed = candidates if allowed is None else allowed
    hit = lookup(key)
    if hit is None and table is not None:
        known = shipped(table[0]).get(table[1])
        if known is not None and valid(known, allowed):
            return known
    if hit is not None:
        if valid(hit, allowed):
            return hit
        msg = f"tuned parameters for {key} in {path()} are not a known candidate ({brief(hit)}); re-tuning"
        log.warning(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)
        with _lock:
            _memory.pop(key, None)
    if not enabled or len(candidates) == 1:
        return candidates[0]
    searches += 1
    start = time.perf_counter()
    try:
        return _search(key, candidates, run, repeats, build)
    finally:
        search_seconds += time.perf_counter() - start


def _tile(params: dict) -> dict:
    """The program-defining part of a choice (split-K is a launch argument)."""
    return {k: v for k, v in params.items() if k != "SPLIT_K"}


def _share() -> float:
    try:
        return float(os.environ.get(ENV_SHARE, SHARE_TOLERANCE))
    except ValueError:
        return SHARE_TOLERANCE


def _budget() -> float:
    try:
        return float(os.environ.get(ENV_BUDGET, SEARCH_BUDGET_S))
    except ValueError:
        return SEARCH_BUDGET_S


def _search(key: str, candidates: list[dict], run, repeats: int, build) -> dict:
    if build is not None:
        prebuild(build, candidates)
    best, best_t = None, float("inf")
    timings: list[tuple[float, dict]] = []
    deadline = time.perf_counter() + _budget()
    for params in progress.iterate(candidates, f"OpenCL tuning: {key}"):
        if best is not None and time.perf_counter() > deadline:
            log.info("tuning %s: time budget spent, %s kept", key, best)
            break
        try:
            run(params)  # warm-up: builds the program (unless prebuilt)
            t = float("inf")
            for _ in range(repeats):  # the fastest of a few runs: robust to noise
                t0 = time.perf_counter()
                took = run(params)
                # ``run`` returns the kernels' device time where it can measure it (events of a
                # profiling queue: what the launches cost, not the host's enqueue and wait)
                t = min(t, float(took) if isinstance(took, (int, float)) and took > 0 else time.perf_counter() - t0)
                if t > 2 * best_t:  # early stop: clearly slower than the best so far
                    break
        except Exception as exc:  # noqa: BLE001 - a candidate the device cannot run is skipped
            log.debug("tuning %s: candidate %s rejected: %s", key, params, exc)
            continue
        timings.append((t, params))
        if t < best_t:
            best, best_t = params, t
    if best is None:
        return candidates[0]
    # fewer programs (cold start): a tile this kind already uses wins if it is nearly as fast
    kind = key.rsplit("|", 1)[0]
    used = _chosen.setdefault(kind, [])
    tile = _tile(best)
    if tile not in used:
        near = sorted(((t, i) for i, (t, p) in enumerate(timings)
                       if t <= best_t * (1 + _share()) and _tile(p) in used))
        if near:  # the fastest of them
            best = timings[near[0][1]][1]
            tile = _tile(best)
    if tile not in used:
        used.append(tile)
    log.info("tuned %s -> %s (%.3f ms)", key, best, best_t * 1e3)
    store(key, best)
    return best
