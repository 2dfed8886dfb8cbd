"""What benchmarks/bench_scale.py prints: one line per run, medians per dataset and side."""

from __future__ import annotations

import statistics


def brief_plateau(got: dict) -> str:
    last = got["samples"][-1]
    workers = ", ".join(
        f"{w['files']} files {mb(w['rss'])} RSS {mb(w['pss'])} PSS" for w in last["workers"]
    )
    trainer = last["trainer"]
    return (
        f"make_loader {got['make_loader_s']:.2f} s ({got['make_loader_cpu_s']:.2f} s CPU), first "
        f"batch {got['first_batch_s']:.2f} s, {got['samples_per_s']:,.0f} samples/s, "
        f"{last['shards_touched']} shards touched; trainer {trainer['files']} files "
        f"{mb(trainer['rss'])} RSS {mb(trainer['pss'])} PSS; workers: {workers or 'none'}"
    )


def print_plateau(results: dict) -> None:
    def median(runs, key):
        return statistics.median(key(r) for r in runs)

    def worst(run, what):  # over the workers of the plateau sample
        return max((w[what] for w in run["samples"][-1]["workers"]), default=0)

    for key, runs in results.items():
        empty_key = "empty" + key[key.index(",") :]  # the same run of the empty dataset
        empty = results.get(empty_key)
        line = (
            f"{key}: make_loader {median(runs, lambda r: r['make_loader_s']):.2f} s "
            f"({median(runs, lambda r: r['make_loader_cpu_s']):.2f} s CPU), first batch "
            f"{median(runs, lambda r: r['first_batch_s']):.2f} s, "
            f"{median(runs, lambda r: r['samples_per_s']):,.0f} samples/s, shards touched "
            f"{median(runs, lambda r: r['samples'][-1]['shards_touched']):.0f}; trainer "
            f"{median(runs, lambda r: r['samples'][-1]['trainer']['files']):.0f} files, "
            f"RSS {mb(median(runs, lambda r: r['samples'][-1]['trainer']['rss']))}, "
            f"PSS {mb(median(runs, lambda r: r['samples'][-1]['trainer']['pss']))}"
        )
        if runs[0]["samples"][-1]["workers"]:
            pss = median(runs, lambda r: worst(r, "pss"))
            line += (
                f"; largest worker {median(runs, lambda r: worst(r, 'files')):.0f} files, "
                f"RSS {mb(median(runs, lambda r: worst(r, 'rss')))}, PSS {mb(pss)}"
            )
            if empty and key != empty_key:
                line += f" = empty + {mb(pss - median(empty, lambda r: worst(r, 'pss')))}"
        loads = [r.get("load_before", 0) for r in runs]
        print(f"{line} (medians of {len(runs)}; load average {min(loads):.1f}-{max(loads):.1f})")


def mb(x: float) -> str:
    return f"{x / 2**20:,.0f} MB"


def brief_open(got: dict) -> str:
    workers = ", ".join(mb(w) for w in got["worker_rss"])
    return (
        f"open {got.get('open_s', 0):.2f} s, make_loader {got['make_loader_s']:.2f} s, first batch "
        f"{got['first_batch_s']:.2f} s, RSS {mb(got['rss'])} (peak {mb(got['peak_rss'])}), "
        f"workers {workers}"
    )


def brief_convert(got: dict) -> str:
    return (
        f"{got['convert_s']:.1f} s, {1000 * got['cpu_s'] / got['episodes']:.2f} CPU ms/episode, "
        f"main peak RSS {mb(got['main_peak_rss'])}, worker peak {mb(got['worker_peak_rss'])}, "
        f"stats {got['stats_s']:.1f} s ({1e6 * got['stats_s'] / got['frames']:.1f} us/frame)"
    )


def print_convert(results: dict) -> None:
    """Medians per conversion and side; CPU per episode relative to the first conversion."""
    first: dict = {}
    for name, by_side in results.items():
        for side, runs in by_side.items():
            cpu = statistics.median(1000 * r["cpu_s"] / r["episodes"] for r in runs)
            first.setdefault(side, cpu)
            stats = statistics.median(1e6 * r["stats_s"] / r["frames"] for r in runs)
            print(
                f"{name} {side}: {cpu:.2f} CPU ms/episode ({cpu / first[side]:.2f}x the first), "
                f"main peak RSS {mb(statistics.median(r['main_peak_rss'] for r in runs))}, "
                f"worker peak {mb(statistics.median(r['worker_peak_rss'] for r in runs))}, "
                f"stats pass {stats:.1f} us per frame (medians of {len(runs)}; load average "
                f"{min(r.get('load_before', 0) for r in runs):.1f}-"
                f"{max(r.get('load_after', 0) for r in runs):.1f})"
            )


def print_open(results: dict, workers: int) -> None:
    def median(runs, key):
        return statistics.median(key(r) for r in runs)

    empty = results.get(f"empty, {workers} workers", {})
    empty = {s: median(runs, lambda r: max(r["worker_rss"])) for s, runs in empty.items()}
    for name, by_side in results.items():
        for side, runs in by_side.items():
            line = (
                f"{name} {side}: open {median(runs, lambda r: r.get('open_s', 0)):.2f} s "
                f"({median(runs, lambda r: r.get('open_cpu_s', 0)):.2f} s CPU), make_loader "
                f"{median(runs, lambda r: r['make_loader_s']):.2f} s "
                f"({median(runs, lambda r: r.get('make_loader_cpu_s', 0)):.2f} s CPU), first "
                f"batch {median(runs, lambda r: r['first_batch_s']):.2f} s, then "
                f"{median(runs, lambda r: r['samples_per_s']):,.0f} samples/s, trainer RSS "
                f"{mb(median(runs, lambda r: r['rss']))} (peak "
                f"{mb(median(runs, lambda r: r['peak_rss']))})"
            )
            if runs[0]["worker_rss"] and side in empty:
                worker = median(runs, lambda r: max(r["worker_rss"]))
                line += f", largest worker {mb(worker)} = empty + {mb(worker - empty[side])}"
            if "pickle_bytes" in runs[0]:
                line += f", pickles to {runs[0]['pickle_bytes'] / 1e3:,.0f} KB"
            loads = [r.get("load_before", 0) for r in runs]
            print(
                f"{line} (medians of {len(runs)}; load average {min(loads):.1f}-{max(loads):.1f})"
            )
