"""`jaxload eval-parallel` (jaxload.tools.eval.launcher): a command run as N shard
processes, their output prefixed, their JSON results merged; a failing shard stops the rest."""

import json
import os
import sys
import time

import pytest

from jaxload.cli import build_parser, main
from jaxload.commands import eval_parallel
from jaxload.errors import JaxloadError
from jaxload.tools.eval.shards import plan_shards
from tests.conftest import REPO_ROOT as REPO

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


def test_placeholders_are_replaced_literally_and_the_environment_tells_the_shard(monkeypatch):
    from jaxload.tools.eval import launcher

    cmd = ["run", "--id={shard_id}/{num_shards}", '{"k": {shard_id}}', "{output}", "{other}"]
    assert launcher._substitute(cmd, 2, 4, REPO / "out.json") == [
        "run", "--id=2/4", '{"k": 2}', str(REPO / "out.json"), "{other}"]  # fmt: skip
    assert launcher._substitute(["{output}"], 0, 1, None) == ["{output}"]  # no --output
    monkeypatch.setenv("MUJOCO_GL", "glfw")  # the user's own setting wins
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    env = launcher._shard_env(1, 2, REPO / "s.json", tune=True)
    assert (env["JAXLOAD_SHARD_ID"], env["JAXLOAD_NUM_SHARDS"]) == ("1", "2")
    assert env["JAXLOAD_SHARD_OUTPUT"] == str(REPO / "s.json")
    assert env["MUJOCO_GL"] == "glfw" and env["PYTHONUNBUFFERED"] == "1"
    assert env["OMP_NUM_THREADS"] == str(max(1, len(os.sched_getaffinity(0)) // 2))
    plain = launcher._shard_env(0, 1, None, tune=False)
    assert "OMP_NUM_THREADS" not in plain and "JAXLOAD_SHARD_OUTPUT" not in plain


def test_bad_arguments_are_refused_before_anything_runs():
    for argv, said in [(["eval-parallel"], "give the command after --"),
                       (["eval-parallel", "--num-shards", "0", "--", "x"], "must be >= 1, got 0")]:  # fmt: skip
        with pytest.raises(JaxloadError, match=said):
            eval_parallel.run(build_parser().parse_args(argv))


@pytest.mark.processes
def test_a_shard_killed_by_a_signal_is_named_with_it(tmp_path, capfd):
    code = "import os, signal\nif os.environ['JAXLOAD_SHARD_ID'] == '1': os.kill(os.getpid(), 9)"
    argv = ["eval-parallel", "--num-shards", "2", "--", sys.executable, "-c", code]
    assert main(argv) == 128 + 9
    assert "shard 1 of 2 failed with signal 9" in capfd.readouterr().err


@pytest.mark.processes
def test_shard_results_that_are_not_json_or_do_not_merge_are_refused(tmp_path, capfd):
    out = tmp_path / "merged.json"
    writes = "import os, sys\nopen(os.environ['JAXLOAD_SHARD_OUTPUT'], 'w').write(sys.argv[1])"
    garbled = "[1, 2"  # cut short
    base = ["eval-parallel", "--num-shards", "2", "--output", str(out), "--", sys.executable]
    assert main([*base, "-c", writes, garbled]) == 1
    assert "shard-00000-of-00002.json is not valid JSON" in capfd.readouterr().err
    assert not out.exists()
    disagree = writes.replace("sys.argv[1]", "'[1]' if os.environ['JAXLOAD_SHARD_ID'] == '0' "
                              "else '{\"a\": 1}'")  # fmt: skip
    assert main([*base, "-c", disagree]) == 1
    err = capfd.readouterr().err
    assert "cannot merge the shards' results: results: shards disagree on the type" in err
    assert not out.exists()


@pytest.mark.processes
def test_a_shard_dir_keeps_the_shards_files_and_names_them(tmp_path, capfd):
    out, shards = tmp_path / "merged.json", tmp_path / "shards"
    writes = "import os\nopen(os.environ['JAXLOAD_SHARD_OUTPUT'], 'w').write('[' + os.environ['JAXLOAD_SHARD_ID'] + ']')"  # fmt: skip
    argv = ["eval-parallel", "--num-shards", "2", "--output", str(out), "--shard-dir",
            str(shards), "--", sys.executable, "-c", writes]  # fmt: skip
    assert main(argv) == 0
    merged = json.loads(out.read_text())
    assert merged["results"] == [0, 1]
    kept = sorted(p.name for p in shards.iterdir())
    assert kept == ["shard-00000-of-00002.json", "shard-00001-of-00002.json"]
    assert [s["output"] for s in merged["shards"]] == [str(shards / k) for k in kept]
    assert merged["command"] == [sys.executable, "-c", writes]
