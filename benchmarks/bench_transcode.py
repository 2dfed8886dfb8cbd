"""Transcode throughput of the x264 presets (and crfs): camera-frames/s per core, bytes,
fidelity and the reader's decode cost, at DROID's 180x320 and on the fidelity fixture.

    python benchmarks/bench_transcode.py --frames 150   # writes benchmarks/results_transcode.json
    python benchmarks/bench_transcode.py --frames 150 --presets medium superfast ultrafast \
        --crfs 14 16 18 --rounds 2 --out benchmarks/results_transcode_crf.json

For each preset, one camera's episodes are transcoded exactly as the converter does
(`converters.video.transcode` over `decode_source_frames`: the source decoded, encoded
at the default crf 14, GOP 4, tune fastdecode, one encoder thread, and every GOP decoded
again for its PSNR against the source), in this process, presets alternating round by
round (`--rounds`, medians). Reported per preset: CPU ms per camera-frame (the whole
transcode: decode, encode, fidelity check; one core), of which the encoder and the
fidelity check (each GOP decoded again; the rest is decoding the source); stored KB per
frame; PSNR min/mean against the source; and the reader's cost per sample of random
frames decoded in batches of 32 (one torchcodec decoder per batch, as the loader does).

Sources: a benchmark camera at 180x320 (LeRobot AV1 crf 30 g 2, textured scene with
sensor noise: `--height`, `--width`, `--frames`), and each camera of the shared fixture
`av1_multi` (96x128 and 72x96: the hardest for the 38 dB bar that chose crf 14,
docs/FORMAT.md) when ../shared/data/lerobot is there.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import bench_data  # noqa: E402

PRESETS = ("medium", "fast", "faster", "veryfast", "superfast", "ultrafast")
FIXTURE = REPO_ROOT.parent / "shared" / "data" / "lerobot" / "av1_multi"


def camera_episodes(src: Path, limit: int) -> list[tuple[str, Path, float, np.ndarray, int]]:
    """(camera, mp4, from_timestamp, timestamps, fps) of up to `limit` episodes per camera."""
    from jaxload.converters.lerobot_v3 import LeRobotV3Source

    source = LeRobotV3Source(src)
    out = []
    for cam in source.video_keys:
        for ep in source.episode_ids[:limit]:
            span = source.video_span(ep, cam)
            length = source.episode(ep).length
            out.append((cam, source.files.local(span.rel), span.from_timestamp,
                        np.arange(length) / source.fps, source.fps))  # fmt: skip
    return out


def transcode_all(episodes, options) -> dict:
    """Transcodes every episode; CPU seconds in all and in the encoder, frames, bytes, PSNR,
    and the streams (for the decode measurement)."""
    import av

    from jaxload.converters import video

    encode_cpu = check_cpu = 0.0
    original, original_check = av.CodecContext.encode, video._gops_psnr

    def timed_encode(self, frame=None):  # the encoder's share of the transcode
        nonlocal encode_cpu
        began = time.process_time()
        try:
            return original(self, frame)
        finally:
            encode_cpu += time.process_time() - began

    def timed_check(*args, **kwargs):  # the fidelity check's: each GOP decoded again
        nonlocal check_cpu
        began = time.process_time()
        try:
            return original_check(*args, **kwargs)
        finally:
            check_cpu += time.process_time() - began

    streams, psnr, frames, size = [], [], 0, 0
    av.CodecContext.encode, video._gops_psnr = timed_encode, timed_check
    began = time.process_time()
    try:
        for cam, path, start, timestamps, fps in episodes:
            source = video.decode_source_frames(path, start, timestamps, episode=0)
            stream = video.transcode(source, options, fps, where=f"{path} {cam}")
            streams.append((cam, stream))
            psnr.append(stream.psnr)
            frames += len(timestamps)
            size += sum(len(s) for s in stream.segments)
    finally:
        av.CodecContext.encode, video._gops_psnr = original, original_check
    cpu = time.process_time() - began
    psnr = np.concatenate(psnr)
    return {"cpu_s": cpu, "encode_cpu_s": encode_cpu, "check_cpu_s": check_cpu,
            "frames": frames, "bytes": size,
            "psnr_min": float(psnr.min()), "psnr_mean": float(psnr.mean()), "streams": streams}  # fmt: skip


def decode_ms_per_sample(streams, batch: int = 32, batches: int = 50, seed: int = 0) -> float:
    """Wall ms per sample decoding random frames in batches (one decoder per batch)."""
    from jaxload.decode.frames import decode_gops
    from jaxload.format.mp4 import gop_num_frames

    rng = np.random.default_rng(seed)
    by_camera: dict = {}
    for cam, s in streams:  # a batch decodes one camera's frames (one size per decoder)
        by_camera.setdefault(cam, []).extend((s, g) for g in range(len(s.segments)))
    cameras = sorted(by_camera)
    best = np.inf
    for _ in range(2):
        began = time.perf_counter()
        for b in range(batches):
            gops = by_camera[cameras[b % len(cameras)]]
            picks = [gops[i] for i in rng.integers(0, len(gops), batch)]
            stream = picks[0][0]
            segments = [s.segments[g] for s, g in picks]
            frames = [[int(rng.integers(0, gop_num_frames(seg)))] for seg in segments]
            decode_gops(stream.init, segments, frames, stream.codec, *_size(stream))
        best = min(best, (time.perf_counter() - began) * 1e3 / (batches * batch))
    return float(best)


def _size(stream) -> tuple[int, int]:
    import io

    import av

    from jaxload.format.mp4 import build_mp4

    mp4, _ = build_mp4(stream.init, stream.segments[:1])
    with av.open(io.BytesIO(mp4)) as container:
        s = container.streams.video[0]
        return s.codec_context.width, s.codec_context.height


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=list(PRESETS))
    parser.add_argument("--crfs", type=int, nargs="+", default=[14], help="each preset at each")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--height", type=int, default=180)
    parser.add_argument("--width", type=int, default=320)
    parser.add_argument("--frames", type=int, default=600, help="of the 180x320 camera")
    parser.add_argument("--cache", type=Path, default=bench_data.DEFAULT_CACHE)
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "benchmarks" / "results_transcode.json"
    )
    parser.add_argument(
        "--timeout", type=int, default=1800, help="seconds; then the process is killed"
    )
    args = parser.parse_args(argv)
    # SVT-AV1 (writing the AV1 source) has deadlocked under load here: SIGALRM with no
    # handler ends the process even when it is stuck in C.
    signal.alarm(args.timeout)
    try:
        return _run(args, argv)
    finally:
        signal.alarm(0)


def _run(args, argv) -> int:
    from jaxload.converters.video import EncodeOptions
    from jaxload.tools import bench

    episodes = max(1, args.frames // 150)
    spec = bench_data.DatasetSpec("transcode", args.height, args.width, episodes=episodes,
                                  min_length=150, max_length=150, cameras=1)  # fmt: skip
    sources = {
        f"{args.height}x{args.width}": camera_episodes(
            bench_data.write_source(spec, args.cache), episodes
        )
    }
    if FIXTURE.is_dir():
        sources["av1_multi"] = camera_episodes(FIXTURE, 14)
    base = EncodeOptions(tune="fastdecode")
    for eps in sources.values():  # warm-up: imports, decoders and encoders opened once
        transcode_all(eps[:1], base)
    settings = [(p, c) for p in args.presets for c in args.crfs]
    label = {(p, c): p if args.crfs == [14] else f"{p} crf {c}" for p, c in settings}
    runs: dict = {name: {label[s]: [] for s in settings} for name in sources}
    for r in range(args.rounds):
        for preset, crf in settings if r % 2 == 0 else settings[::-1]:
            options = dataclasses.replace(base, preset=preset, crf=crf)
            key = label[preset, crf]
            for name, eps in sources.items():
                got = transcode_all(eps, options)
                got["decode_ms_per_sample"] = decode_ms_per_sample(got.pop("streams"))
                runs[name][key].append(got)
                print(f"round {r + 1} {name} {key}: {got['cpu_s'] * 1e3 / got['frames']:.2f} "
                      f"CPU ms/frame, min PSNR {got['psnr_min']:.2f} dB", flush=True)  # fmt: skip
    table = {}
    for name, by_preset in runs.items():
        table[name] = {}
        for preset, got in by_preset.items():
            med = {k: statistics.median(g[k] for g in got) for k in got[0]}
            row = {
                "cpu_ms_per_frame": 1e3 * med["cpu_s"] / med["frames"],
                "encode_cpu_ms_per_frame": 1e3 * med["encode_cpu_s"] / med["frames"],
                "check_cpu_ms_per_frame": 1e3 * med["check_cpu_s"] / med["frames"],
                "frames_per_s_per_core": med["frames"] / med["cpu_s"],
                "kb_per_frame": med["bytes"] / med["frames"] / 1e3,
                "psnr_min": min(g["psnr_min"] for g in got),
                "psnr_mean": med["psnr_mean"],
                "decode_ms_per_sample": med["decode_ms_per_sample"],
            }
            table[name][preset] = row
            print(f"{name} {preset:16s}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()))
    doc = {"command": "python benchmarks/bench_transcode.py " + " ".join(argv or sys.argv[1:]),
           "machine": bench.machine_info(), "when": time.strftime("%Y-%m-%d %H:%M"),
           "table": table, "runs": runs}  # fmt: skip
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
