"""A new user's first hour with make_loader (issue 18): batches go into `jax.jit` as they
come, `keys=` keeps strings, `dataset_index` only in mixtures, a readable `Loader` repr,
(scripts without `if __name__ == "__main__":`: tests/workers/test_main_guard.py). Real
converted datasets throughout, real worker processes in the script tests."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxload
from jaxload.converters.convert import convert
from jaxload.errors import BatchTransformError
from tests.support.lerobot_factory import write_lerobot_v3

REPO = Path(__file__).resolve().parents[2]
CAMERA = "observation.images.top"


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> tuple[Path, Path]:
    """(a, b): `a` has a camera and tasks; `b` is tabular, with a string feature of its own
    and a larger state (a mixture of the two has differing string keys)."""
    root = tmp_path_factory.mktemp("first_hour")
    a = write_lerobot_v3(root / "src_a", cameras={CAMERA: (48, 64)})
    b = write_lerobot_v3(
        root / "src_b", episode_lengths=(6, 9), cameras={}, state_dim=6, string_features=("note",)
    )
    convert(a, root / "a", workers=1, progress=False)
    convert(b, root / "b", workers=1, progress=False)
    return root / "a", root / "b"


def _loader(paths, options=None, **kw):
    kw.setdefault("host_index", 0)
    kw.setdefault("host_count", 1)
    options = options or jaxload.PipelineOptions(num_workers=0)
    return jaxload.make_loader(paths, options=options, **kw)


@jax.jit
def _jitted_sum(batch):
    """A step that touches every value of the batch."""
    return sum(jnp.sum(v.astype(jnp.float32)) for v in batch.values())


# -- what a batch holds ------------------------------------------------------------------------


def test_the_default_batch_goes_into_jit_and_keys_keeps_the_strings(datasets):
    a, _ = datasets
    batch = next(_loader(a, global_batch_size=4, seed=1))
    assert "task" not in batch and "dataset_index" not in batch
    assert all(v.dtype.kind in "biuf" for v in batch.values())
    assert np.isfinite(float(_jitted_sum(batch)))
    keys = ["index", "task", "dataset_index", "action"]
    kept = next(_loader(a, global_batch_size=4, seed=1, keys=keys))
    assert list(kept) == keys
    ds = jaxload.open(a)
    assert kept["task"].tolist() == [ds[int(i)]["task"] for i in kept["index"]]
    assert kept["dataset_index"].tolist() == [0] * 4
    assert np.array_equal(kept["action"], batch["action"])


def _tokenize(batch):
    """A stand-in tokenizer: task -> int32 character codes (module level: workers unpickle it)."""
    codes = [[ord(c) for c in t[:8].ljust(8)] for t in batch["task"]]
    return {**batch, "task_tokens": np.asarray(codes, np.int32)}


def test_a_batch_transform_sees_task_and_its_arrays_are_kept(datasets):
    a, _ = datasets
    batch = next(_loader(a, global_batch_size=4, batch_transform=_tokenize))
    assert "task" not in batch and batch["task_tokens"].shape == (4, 8)
    assert "".join(map(chr, batch["task_tokens"][0])).strip() in "".join(
        jaxload.open(a).tasks.values()
    )
    assert np.isfinite(float(_jitted_sum(batch)))


def test_a_mixture_has_dataset_index_and_keeps_each_datasets_strings_on_request(datasets):
    a, b = datasets
    kw = dict(global_batch_size=10, weights=[0.5, 0.5], seed=2)
    batch = next(_loader([a, b], **kw))
    assert "dataset_index" in batch and not {"task", "note"} & set(batch)
    assert np.isfinite(float(_jitted_sum(batch)))
    assert set(_loader([a, b], **kw).element_spec) == set(batch)
    kept = next(_loader([a, b], keys=["dataset_index", "task", "note"], **kw))
    from_b = kept["dataset_index"] == 1
    assert from_b.sum() == 5
    assert all(n == "" for n in kept["note"][~from_b])  # dataset a has no "note"
    assert all(n != "" for n in kept["note"][from_b]) and all(t != "" for t in kept["task"])


def test_keys_are_checked(datasets):
    a, _ = datasets
    with pytest.raises(ValueError, match=r"a batch holds no \['actions'\]; it holds .*'action'"):
        _loader(a, global_batch_size=4, keys=["actions"])
    with pytest.raises(TypeError, match="keys must be a list of key names"):
        _loader(a, global_batch_size=4, keys="action")
    with pytest.raises(ValueError, match=r"keys lists \['action'\] more than once"):
        _loader(a, global_batch_size=4, keys=["action", "action"])
    # With a transform the check waits for the transformed batch.
    loader = _loader(a, global_batch_size=4, keys=["tokens"], batch_transform=_tokenize)
    with pytest.raises(BatchTransformError, match=r"\['tokens'\].*_tokenize.*'task_tokens'"):
        next(loader)


def test_repr_says_what_is_read_and_where_the_loader_is(datasets):
    a, b = datasets
    loader = _loader(a, global_batch_size=4, seed=3, host_count=2, host_index=1)
    for _ in range(2):
        next(loader)
    assert repr(loader) == (
        f"Loader(sources=['{a}'], global_batch_size=4, seed=3, hosts=2 (this one: rows 2..3), "
        "workers=0, read_threads=2, epoch=0, step=2, position=8)"
    )
    mixture = _loader([a, b], global_batch_size=10, weights=[0.7, 0.3], num_epochs=2)
    assert repr(mixture).startswith(f"Loader(sources=['{a}', '{b}'] (7:3 per block of 10), ")
    assert repr(mixture).endswith("epoch=0 of 2, step=0, position=0)")


# -- global arrays under a mesh: the README recipe, Explicit and Auto axes -----------------------

SHARDED_JIT = """
import sys
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
import jaxload

if __name__ == "__main__":
    path = sys.argv[1]
    assert jax.device_count() == 4
    for axis_type in (AxisType.Explicit, AxisType.Auto):
        mesh = jax.make_mesh((4,), ("data",), axis_types=(axis_type,))
        loader = jaxload.make_loader(
            path, global_batch_size=8, seed=0,
            options=jaxload.PipelineOptions(num_workers=0),
            sharding=NamedSharding(mesh, P("data")),
            delta_timestamps={"action": [k / 10 for k in range(4)]},
        )
        spec = loader.element_spec
        w = jnp.zeros((spec["observation.state"].shape[-1], spec["action"].shape[-1]))
        w = jax.device_put(w, NamedSharding(mesh, P()))  # replicated: Explicit axes need it

        @jax.jit
        def train_step(w, batch):
            def loss(w):
                pred = (batch["observation.state"] @ w)[:, None]
                valid = ~batch["action_is_pad"][..., None]
                image = batch["observation.images.top"].astype(jnp.float32).mean()
                return (((pred - batch["action"]) ** 2) * valid).mean() + 0 * image
            value, grad = jax.value_and_grad(loss)(w)
            return w - 0.1 * grad, value

        losses = []
        for _ in range(3):
            batch = next(loader)
            assert all(isinstance(v, jax.Array) for v in batch.values()), sorted(batch)
            w, loss = train_step(w, batch)
            losses.append(float(loss))
        assert np.isfinite(losses[0]) and losses[0] > 0, losses
        assert w.sharding.is_fully_replicated, w.sharding
        kept = next(jaxload.make_loader(
            path, global_batch_size=8, options=jaxload.PipelineOptions(num_workers=0),
            sharding=NamedSharding(mesh, P("data")), keys=["action", "task"]))
        assert isinstance(kept["action"], jax.Array) and kept["task"].dtype.kind == "U"
        print("OK", axis_type, losses[0])
"""


def _run_script(tmp_path: Path, text: str, *args: str, devices: int = 1):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(text))
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"}
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    return subprocess.run(
        [sys.executable, str(script), *map(str, args)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.processes
def test_sharded_batches_go_into_a_jitted_step_with_explicit_and_auto_mesh_axes(datasets, tmp_path):
    run = _run_script(tmp_path, SHARDED_JIT, datasets[0], devices=4)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("OK") == 2, run.stdout
