"""``kernelkit bench --plot FILE.png``: time per op type and the latency histogram (matplotlib, the
optional ``plot`` extra)."""
from __future__ import annotations

from pathlib import Path


def plot_bench(result, path) -> None:
    """Write a PNG of ``result`` (a BenchResult): per-op bars when it was profiled, and the
    histogram of the timed runs' latency with the p50 and p99 marked."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no window
        import matplotlib.pyplot as plt
    except ImportError as exc:
        from ..cli import MissingExtraError

        raise MissingExtraError(f"--plot needs matplotlib: pip install 'kernelkit[plot]' ({exc})") from exc
    panels = 2 if result.profile else 1
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.5), squeeze=False)
    axes = axes[0]
    if result.profile:
        per_op: dict[str, float] = {}
        for r in result.profile:
            per_op[r["op"]] = per_op.get(r["op"], 0.0) + r["total_ms"] / max(r["calls"], 1)
        ops = sorted(per_op, key=per_op.get)
        axes[0].barh(ops, [per_op[o] for o in ops], color="tab:blue")
        axes[0].set_xlabel("ms per run")
        axes[0].set_title("time per op type")
    ax = axes[-1]
    ax.hist(result.times_ms, bins=min(50, max(5, len(result.times_ms) // 4)), color="tab:gray")
    for key, colour in (("p50_ms", "tab:green"), ("p99_ms", "tab:red")):
        ax.axvline(result.stats[key], color=colour, label=f"{key[:-3]} {result.stats[key]:.3f} ms")
    ax.set_xlabel("latency, ms")
    ax.set_ylabel("runs")
    ax.set_title(f"{result.stats['runs']} runs, {result.device}")
    ax.legend()
    fig.suptitle(Path(str(result.model)).name)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
