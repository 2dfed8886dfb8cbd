"""Balanced evaluation sharding (jaxload.tools.eval.shards) and `jaxload eval-parallel`."""

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from jaxload.balance import imbalance
from jaxload.cli import build_parser, main
from jaxload.commands import eval_parallel
from jaxload.converters.convert import convert
from jaxload.errors import JaxloadError
from jaxload.tools.eval.shards import episode_seed, merge_results, plan_shards, shard_episodes

REPO = Path(__file__).resolve().parents[2]


def _episode_lengths() -> np.ndarray:
    """200 episodes of 10..3000 frames, as recorded: 8 tasks in rotation (each with its own
    typical length, geometric from 10 to 750 frames), and a second session whose episodes
    are 4x longer. Round robin then gives one shard the same task over and over, and a
    contiguous split gives the late shards the long session."""
    i = np.arange(200)
    base = np.geomspace(10, 750, 8)[i % 8]
    session = np.where(i < 100, 1.0, 4.0)
    noise = np.random.default_rng(0).uniform(0.85, 1.15, len(i))
    return np.clip(np.rint(base * session * noise), 10, 3000).astype(np.int64)


@pytest.mark.parametrize("shards", [4, 8])
def test_lpt_shards_are_balanced_where_naive_splits_are_not(shards):
    lengths = _episode_lengths()
    assert lengths.min() == 10 and lengths.max() == 3000
    plan = plan_shards(lengths, shards)
    assert plan[0].imbalance <= 1.05
    i = np.arange(len(lengths))
    contiguous, round_robin = i * shards // len(i), i % shards
    assert imbalance(lengths, contiguous, shards) >= 1.5
    assert imbalance(lengths, round_robin, shards) >= 1.5
    # Disjoint and complete, each shard's own call agrees with the plan.
    episodes = [shard_episodes(lengths, shards, s).episodes for s in range(shards)]
    union = np.concatenate(episodes)
    assert sorted(union.tolist()) == list(range(len(lengths)))
    assignment = np.empty(len(lengths), dtype=np.int64)
    for s, mine in enumerate(episodes):
        np.testing.assert_array_equal(mine, plan[s].episodes)
        assert plan[s].cost == lengths[mine].sum()
        assignment[mine] = s
    assert imbalance(lengths, assignment, shards) == plan[0].imbalance


def test_balanced_on_random_lengths_too():
    lengths = np.random.default_rng(1).integers(10, 3001, size=200)
    for shards in (4, 8):
        assert plan_shards(lengths, shards)[0].imbalance <= 1.05


def test_seeds_are_per_episode_distinct_and_independent_of_the_sharding():
    lengths = dict(zip(range(100, 300), _episode_lengths()))  # episode ids 100..299
    seeds = {}
    for shards in (1, 3, 8):
        for shard in plan_shards(lengths, shards, base_seed=7):
            for episode, seed in zip(shard.episodes, shard.seeds):
                assert seeds.setdefault(int(episode), seed) == seed
    assert len(seeds) == 200 and len(set(seeds.values())) == 200
    assert seeds[150] == episode_seed(7, 150) != episode_seed(8, 150)
    shard = shard_episodes(lengths, 3, 1, base_seed=7)
    a = np.random.default_rng(shard.seed_sequence(int(shard.episodes[0]))).random(3)
    b = np.random.default_rng(np.random.SeedSequence(7, spawn_key=(int(shard.episodes[0]),)))
    np.testing.assert_array_equal(a, b.random(3))


def test_costs_default_to_frames_times_cameras_and_can_be_given(shared_lerobot, tmp_path):
    root = tmp_path / "ds"
    convert(shared_lerobot / "h264_single", root, episodes="0-3", workers=1, progress=False)
    plan = plan_shards(root, 2)  # a dataset path: its episodes, lengths and 1 camera
    assert sorted(np.concatenate([p.episodes for p in plan]).tolist()) == [0, 1, 2, 3]
    assert sum(p.cost for p in plan) == 23 + 5 + 70 + 41
    weighted = plan_shards({0: 10, 1: 10, 2: 10}, 2, cost=lambda e, n: n * (e + 1))
    assert sorted(p.cost for p in weighted) == [30.0, 30.0]  # costs 10, 20, 30: {30} {10, 20}
    assert plan_shards([5, 5], 2, cost=[1.0, 9.0])[0].cost in (1.0, 9.0)
    with pytest.raises(ValueError, match="shard_id 2"):
        shard_episodes([1, 2], 2, 2)
    with pytest.raises(ValueError, match="cost has 1 values for 2"):
        plan_shards([1, 2], 2, cost=[1.0])


def test_merge_results_rules():
    merged = merge_results(
        [
            {"episodes": [0, 3], "success": [1, 0], "sr": 0.5, "cfg": {"policy": "a"}},
            {"episodes": [1], "success": [1], "sr": 1.0, "cfg": {"policy": "a"}, "extra": [9]},
        ]
    )
    assert merged == {
        "episodes": [0, 3, 1],
        "success": [1, 0, 1],
        "sr": [0.5, 1.0],
        "cfg": {"policy": ["a", "a"]},
        "extra": [9],
    }
    assert merge_results([[1], [2, 3]]) == [1, 2, 3]
    with pytest.raises(ValueError, match=r"results\.x: shards disagree"):
        merge_results([{"x": [1]}, {"x": {"a": 1}}])


# --- eval-parallel, with real processes -----------------------------------------------------

# The evaluation script each shard runs: it takes its episodes with shard_episodes and writes
# one JSON record per episode. It imports jaxload.tools.eval.shards without jaxload/__init__ (which loads
# torch for the reader) so that four shards start in a fraction of a second on two cores.
SCRIPT = """
import json, os, sys, types
package = types.ModuleType("jaxload")
package.__path__ = [{repo!r} + "/jaxload"]
sys.modules["jaxload"] = package
from jaxload.tools.eval.shards import shard_episodes

shard_id, num_shards = int(os.environ["JAXLOAD_SHARD_ID"]), int(os.environ["JAXLOAD_NUM_SHARDS"])
assert sys.argv[1:3] == [str(shard_id), str(num_shards)], sys.argv  # placeholders
shard = shard_episodes([30, 5, 70, 41, 12, 58, 9, 33], num_shards, shard_id)
print("shard", shard_id, "episodes", shard.episodes.tolist(), flush=True)
if os.environ.get("FAIL_SHARD") == str(shard_id):
    print("simulated crash", flush=True)
    sys.exit(3)
record = {{
    "episodes": shard.episodes.tolist(),
    "seeds": shard.seeds,
    "omp": os.environ.get("OMP_NUM_THREADS"),
    "mujoco_gl": os.environ.get("MUJOCO_GL"),
}}
with open(sys.argv[3], "w") as f:
    json.dump(record, f)
"""


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "evaluate.py"
    path.write_text(SCRIPT.format(repo=str(REPO)))
    return path


def _eval_parallel(tmp_path, script, shards, *extra):
    out = tmp_path / f"merged-{shards}.json"
    argv = ["eval-parallel", "--num-shards", str(shards), "--output", str(out), *extra]
    argv += ["--", sys.executable, str(script), "{shard_id}", "{num_shards}", "{output}"]
    return main(argv), out


@pytest.mark.parametrize("shards", [1, 2, 4])
@pytest.mark.processes
def test_eval_parallel_runs_shards_and_merges_their_json(tmp_path, script, shards, capfd):
    code, out = _eval_parallel(tmp_path, script, shards)
    assert code == 0
    merged = json.loads(out.read_text())
    assert merged["num_shards"] == shards and [s["shard_id"] for s in merged["shards"]] == list(
        range(shards)
    )
    assert all(s["returncode"] == 0 for s in merged["shards"])
    episodes = merged["results"]["episodes"]
    assert sorted(episodes) == list(range(8))  # every episode once, over all shards
    plan = plan_shards([30, 5, 70, 41, 12, 58, 9, 33], shards)
    assert episodes == [e for p in plan for e in p.episodes.tolist()]  # in shard order
    assert merged["results"]["seeds"] == [s for p in plan for s in p.seeds]
    printed = capfd.readouterr().out
    if shards == 1:  # the command runs unchanged: no prefix, no thread or GL settings
        assert merged["results"]["omp"] == [os.environ.get("OMP_NUM_THREADS")]
        assert "[shard" not in printed
    else:
        cores = len(os.sched_getaffinity(0))
        expected = os.environ.get("OMP_NUM_THREADS", str(max(1, cores // shards)))
        assert merged["results"]["omp"] == [expected] * shards
        assert merged["results"]["mujoco_gl"] == [os.environ.get("MUJOCO_GL", "osmesa")] * shards
        for s in range(shards):
            assert f"[shard {s}/{shards}] shard {s} episodes" in printed
    assert not list(tmp_path.glob(".merged-*.shards-*"))  # shard files cleaned up


@pytest.mark.processes
def test_eval_parallel_fails_clearly_when_a_shard_fails(tmp_path, script, capfd, monkeypatch):
    monkeypatch.setenv("FAIL_SHARD", "1")
    code, out = _eval_parallel(tmp_path, script, 3)
    assert code == 3 and not out.exists()
    err = capfd.readouterr().err
    assert "shard 1 of 3 failed with exit code 3" in err
    assert "simulated crash" in err and "nothing was merged" in err


@pytest.mark.processes
def test_eval_parallel_rejects_a_shard_that_wrote_nothing(tmp_path, capfd):
    out = tmp_path / "merged.json"
    argv = ["eval-parallel", "--num-shards", "2", "--output", str(out), "--", sys.executable]
    assert main([*argv, "-c", "pass"]) == 1
    assert "shard 0 of 2 exited 0 but wrote no JSON" in capfd.readouterr().err
    assert not out.exists()
    with pytest.raises(JaxloadError, match=r"uses \{output\}; pass --output"):
        eval_parallel.run(build_parser().parse_args(["eval-parallel", "--", "x", "{output}"]))


def test_one_shard_without_output_execs_the_command_unchanged(monkeypatch):
    calls = []

    def fake_exec(file, argv, env):  # exec would replace the test process
        calls.append((file, argv, env))

    monkeypatch.setattr(os, "execvpe", fake_exec)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    argv = ["eval-parallel", "--", "python", "eval.py", "--shard", "{shard_id}", '{"k": 1}']
    assert main(argv) == 0
    ((file, args, env),) = calls
    assert file == "python" and args == ["python", "eval.py", "--shard", "0", '{"k": 1}']
    assert env["JAXLOAD_SHARD_ID"] == "0" and env["JAXLOAD_NUM_SHARDS"] == "1"
    assert "OMP_NUM_THREADS" not in env and "JAXLOAD_SHARD_OUTPUT" not in env


@pytest.mark.processes
def test_a_failing_shard_stops_the_others(tmp_path, capfd):
    started = time.monotonic()
    code = "import os, sys, time\nif os.environ['JAXLOAD_SHARD_ID'] == '0': sys.exit(5)\n"
    code += "time.sleep(300)"
    out = tmp_path / "merged.json"
    argv = ["eval-parallel", "--num-shards", "3", "--output", str(out), "--"]
    assert main([*argv, sys.executable, "-c", code]) == 5
    assert time.monotonic() - started < 60  # the sleepers were stopped, not awaited
    assert "shard 0 of 3 failed with exit code 5" in capfd.readouterr().err
    assert not out.exists()
