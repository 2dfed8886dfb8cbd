"""Refreshes the tables in benchmarks/RESULTS.md from the benchmarks' JSON results.

    python benchmarks/report.py

Each table sits between `<!-- table:NAME -->` and `<!-- /table:NAME -->` markers and is
rewritten from benchmarks/results*.json; the prose around the markers (and every section
without markers) is left as it is. A table whose JSON is missing is left unchanged.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS_MD = HERE / "RESULTS.md"


def _load(name: str) -> dict[str, Any] | None:
    path = HERE / name
    return json.loads(path.read_text()) if path.is_file() else None


def _mb(n: float | None) -> str:
    return "–" if n is None else f"{n / 2**20:,.0f} MB"


def _num(x: float | None, spec: str = ".1f") -> str:
    return "–" if x is None else format(x, spec)


def throughput_table(doc: dict) -> str:
    rows = [
        "| dataset | pipeline | samples/s | frames/s | CPU ms / sample | first batch | peak RSS |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for b in doc["benchmarks"]:
        label, w = b["label"], b["num_workers"]
        for title, t in (
            (f"jaxload, {w} workers", b["jaxload"]),
            (_defaults_title(b.get("jaxload_defaults")), b.get("jaxload_defaults")),
            (f"LeRobot + DataLoader, {w} workers", b["lerobot"]),
        ):
            if t is None:
                continue
            rows.append(
                f"| {label} | {title} | {t['samples_per_s']:.1f} | {t['frames_per_s']:.0f} | "
                f"{_num(t['cpu_ms_per_sample'], '.2f')} | {_num(t['time_to_first_batch_s'], '.1f')} s | "
                f"{_mb(t['peak_rss_bytes'])} |"
            )
        d = b["decode_limit"]
        if d is not None:
            rows.append(
                f"| {label} | decode limit (torchcodec only, {d['best']}) | {d['samples_per_s']:.1f} | "
                f"{d['frames_per_s']:.0f} | {d['cpu_ms_per_sample']:.2f} | | |"
            )
    rows += [
        "",
        "| dataset | jaxload / LeRobot (samples/s) | jaxload / decode limit (samples/s) "
        "| same, in CPU time per sample: LeRobot / jaxload | decode limit / jaxload "
        "| jaxload defaults / LeRobot | jaxload defaults / decode limit |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for b in doc["benchmarks"]:
        r, jax_cpu = b["ratios"], b["jaxload"]["cpu_ms_per_sample"]
        cpu_lerobot = cpu_limit = None
        if jax_cpu and b["lerobot"] and b["lerobot"]["cpu_ms_per_sample"]:
            cpu_lerobot = b["lerobot"]["cpu_ms_per_sample"] / jax_cpu
        if jax_cpu and b["decode_limit"]:
            cpu_limit = b["decode_limit"]["cpu_ms_per_sample"] / jax_cpu
        lim, dlim = r["jaxload/decode_limit"], r.get("jaxload_defaults/decode_limit")
        rows.append(
            f"| {b['label']} | {_num(r['jaxload/lerobot'], '.2f')}× | "
            f"{'–' if lim is None else f'{100 * lim:.0f}%'} | {_num(cpu_lerobot, '.2f')}× | "
            f"{'–' if cpu_limit is None else f'{100 * cpu_limit:.0f}%'} | "
            f"{_num(r.get('jaxload_defaults/lerobot'), '.2f')}× | "
            f"{'–' if dlim is None else f'{100 * dlim:.0f}%'} |"
        )
    rows += ["", "| target | measured | met? |", "|---|---:|---|"]
    names = {
        "vs_lerobot": "jaxload / LeRobot ≥ {t}× (same worker count)",
        "vs_decode_limit": "jaxload ≥ {p}% of the decode limit (same worker count)",
        "defaults_vs_lerobot": "jaxload / LeRobot ≥ {t}× (jaxload's default workers/threads)",
        "defaults_vs_decode_limit": "jaxload ≥ {p}% of the decode limit (jaxload's defaults)",
    }
    for c in doc.get("targets", []):
        text = names[c["metric"]].format(t=c["target"], p=round(100 * c["target"]))
        value = c["value"]
        shown = (
            "–"
            if value is None
            else (f"{100 * value:.0f}%" if "decode_limit" in c["metric"] else f"{value:.2f}×")
        )
        rows.append(f"| {c['dataset']}: {text} | {shown} | {'yes' if c['met'] else '**no**'} |")
    return "\n".join(rows)


def _defaults_title(t: dict | None) -> str:
    if t is None:
        return ""
    threads = t["details"].get("loader_kwargs", {}).get("read_threads", "?")
    return f"jaxload, its defaults here: {t['num_workers']} workers, {threads} read threads"


def rounds_table(doc: dict) -> str:
    rows = [
        "| dataset | pipeline | samples/s per round | load average before each round |",
        "|---|---|---|---|",
    ]
    for b in doc["benchmarks"]:
        for name in ("jaxload", "jaxload_defaults", "lerobot"):
            t = b.get(name)
            if t is None:
                continue
            rounds = t["details"].get("rounds") or [
                {
                    "samples_per_s": t["samples_per_s"],
                    "loadavg_before": t["details"].get("loadavg_before"),
                }
            ]
            rates = ", ".join(f"{r['samples_per_s']:.1f}" for r in rounds)
            loads = ", ".join(str((r.get("loadavg_before") or ["?"])[0]) for r in rounds)
            rows.append(f"| {b['label']} | {name} | {rates} | {loads} |")
    return "\n".join(rows)


def datasets_table(doc: dict) -> str:
    rows = [
        "| dataset | frames (episodes, lengths) | cameras | LeRobot source | jaxload dataset | generated in | converted in |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for label, d in doc.get("datasets", {}).items():
        s = d["spec"]
        conv = d.get("conversion") or {}
        rows.append(
            f"| {label} | {d['lengths']} | {s['cameras']} × {s['height']}×{s['width']} {s['codec'].upper()} | "
            f"{_mb(d['source_bytes'])} | {_mb(d['dataset_bytes'])} | {_num(d['generation_seconds'], '.0f')} s | "
            f"{_num(conv.get('seconds'), '.0f')} s |"
        )
    return "\n".join(rows)


def ttfb_table(doc: dict) -> str:
    rows = [
        "| workers | torch, torchcodec, PyAV | make_loader() | first next() "
        "| time to first batch (median) | runs |",
        "|---:|---|---:|---:|---:|---|",
    ]
    for r in doc["results"]:
        runs = ", ".join(f"{x['total_s']:.2f}" for x in r["runs"])
        imports = "imported before" if r.get("imports_paid_before") else "imported by the loader"
        rows.append(
            f"| {r['num_workers']} | {imports} | {r['make_loader_s']:.2f} s | {r['first_next_s']:.2f} s | "
            f"**{r['total_s']:.2f} s** | {runs} |"
        )
    imports = doc.get("worker_import_seconds")
    if imports:
        rows += [
            "",
            "Imports in a fresh process (what every Grain worker pays before its first read): "
            + ", ".join(f"`{k}` {v:.2f} s" for k, v in imports.items())
            + f" (total {sum(imports.values()):.2f} s).",
        ]
    plain = doc.get("plain_torchcodec_import_s")
    if plain is not None:
        rows[-1] += (
            f" torchcodec is imported through `jaxload.decode.torchcodec_import`; a plain `import "
            f"torchcodec.decoders` after torch takes {plain:.2f} s (it imports torch._dynamo)."
        )
    return "\n".join(rows)


def memory_table(doc: dict) -> str:
    rows = [
        "| epoch | peak RSS (process tree) | RSS at its end | seconds |",
        "|---:|---:|---:|---:|",
    ]
    for e in doc["epochs"]:
        rows.append(
            f"| {e['epoch']} | {_mb(e['peak_rss_bytes'])} | {_mb(e['last_rss_bytes'])} | {e['seconds']:.1f} |"
        )
    verdict = "within" if doc["within_target"] else "**outside**"
    rows.append("")
    rows.append(
        f"Epoch {doc['epochs'][-1]['epoch']} vs epoch 1 peak: {100 * doc['growth_last_vs_first']:+.1f}% "
        f"({verdict} the 10% target); {doc['epoch_size']} samples per epoch, "
        f"{doc['num_workers']} workers, batch {doc['batch_size']}."
    )
    return "\n".join(rows)


def bytes_table(doc: dict) -> str:
    rows = [
        "| dataset | episodes (frames) | bytes / sample: mean | median | max | one episode's bytes | long / short |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for label, r in doc["results"].items():
        for name in ("short", "long"):
            g = r["groups"][name]
            ratio = f"{r['long_over_short']:.2f}" if name == "long" else ""
            rows.append(
                f"| {label} | {name}: {g['episode_lengths']} | {g['mean_bytes'] / 1024:.1f} KB | "
                f"{g['median_bytes'] / 1024:.1f} KB | {g['max_bytes'] / 1024:.1f} KB | "
                f"{g['episode_bytes_estimate'] / 1024:,.0f} KB | {ratio} |"
            )
    return "\n".join(rows)


def gop_table(doc: dict) -> str:
    rows = [
        "| codec | tune | GOP | size / source | PSNR min | PSNR mean | batches of 32: ms / sample "
        "(CPU) | one sample at a time: ms / sample (CPU) | conversion |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in doc["rows"]:
        rows.append(
            f"| {r['codec']} | {r.get('tune', 'none')} | {r['gop']} | {r['size_ratio']:.2f} | {r['psnr_min_db']:.1f} dB | "
            f"{r['psnr_mean_db']:.1f} dB | {r['ms_per_sample_batched']:.2f} "
            f"({r['cpu_ms_per_sample_batched']:.2f}) | {r['ms_per_sample_single']:.2f} "
            f"({r['cpu_ms_per_sample_single']:.2f}) | {r['convert_seconds']:.0f} s |"
        )
    return "\n".join(rows)


def profile_table(doc: dict) -> str:
    labels = list(doc["results"])
    names = {
        "arrayrecord_read": "ArrayRecord reads",
        "build_mp4": "assemble the batch's mp4 (init segment + GOP fragments)",
        "decoder_create": "torchcodec decoder creation",
        "decode": "torchcodec decode (`get_frames_at`)",
        "collate": "collation (`BatchSchema.collate`)",
        "other": "other reader Python (windows, rows, sample dicts)",
    }
    rows = [
        "| stage (one worker, per batch of 32) | " + " | ".join(labels) + " |",
        "|---|" + "---:|" * len(labels),
    ]
    for stage, title in names.items():
        if any(stage not in doc["results"][x]["stages"]["ms_per_batch"] for x in labels):
            continue  # a stage an older profile did not have
        cells = []
        for label in labels:
            s = doc["results"][label]["stages"]
            cells.append(f"{s['ms_per_batch'][stage]:.1f} ms ({100 * s['share'][stage]:.0f}%)")
        rows.append(f"| {title} | " + " | ".join(cells) + " |")
    cells = [f"**{doc['results'][x]['stages']['total_ms_per_batch']:.1f} ms**" for x in labels]
    rows.append("| total | " + " | ".join(cells) + " |")
    cells = []
    for x in labels:
        ipc = doc["results"][x]["ipc"]
        cells.append(
            f"{ipc['ms_per_batch']:.1f} ms/batch wall, CPU {ipc['cpu_ms_per_batch_all_processes']:.1f} ms "
            f"({ipc['batch_bytes'] / 2**20:.1f} MB)"
        )
    rows.append(
        "| IPC alone: workers → main process (shared-memory slots, pickled small arrays) | "
        + " | ".join(cells)
        + " |"
    )
    cells = []
    for x in labels:
        lo = doc["results"][x]["loader"]
        main = lo["details"].get("main_process_cpu_ms_per_sample") or 0
        cells.append(
            f"{lo['samples_per_s']:.0f} samples/s; CPU {lo['cpu_ms_per_sample'] * 32:.1f} ms/batch, "
            f"main process {main * 32:.1f} ms/batch"
        )
    rows.append("| the loader, 2 workers | " + " | ".join(cells) + " |")
    return "\n".join(rows)


TABLES: dict[str, tuple[str, Callable[[dict], str]]] = {
    "throughput": ("results.json", throughput_table),
    "rounds": ("results.json", rounds_table),
    "datasets": ("results.json", datasets_table),
    "ttfb": ("results_ttfb.json", ttfb_table),
    "memory": ("results_memory.json", memory_table),
    "bytes": ("results_bytes.json", bytes_table),
    "gop": ("results_gop.json", gop_table),
    "gop_large": ("results_gop_large.json", gop_table),
    "profile": ("results_profile.json", profile_table),
}


def refresh(text: str) -> str:
    """`text` with every marked table regenerated (where its JSON exists)."""
    for name, (source, render) in TABLES.items():
        doc = _load(source)
        if doc is None:
            continue
        # Empty markers (adjacent lines) and markers around an old table alike.
        pattern = re.compile(rf"(<!-- table:{name} -->\n)(?:.*?\n)??(<!-- /table:{name} -->)", re.S)
        text = pattern.sub(lambda m, d=doc, r=render: m.group(1) + r(d) + "\n" + m.group(2), text)
    return text


def main() -> int:
    if not RESULTS_MD.is_file():
        print(f"{RESULTS_MD} is missing", file=sys.stderr)
        return 1
    RESULTS_MD.write_text(refresh(RESULTS_MD.read_text()))
    print(f"refreshed the tables in {RESULTS_MD}")
    if (HERE / "results.json").is_file():
        sys.path.insert(0, str(HERE.parent))
        from jaxload.tools import bench

        bench.plot(bench.read_json(HERE / "results.json"), HERE / "results.png")
        print(f"redrew {HERE / 'results.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
