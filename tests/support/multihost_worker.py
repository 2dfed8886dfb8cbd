"""One process of a real 2-process JAX job (CPU, gloo) for tests/e2e/test_multihost.py.

    python -m tests.support.multihost_worker PROCESS_ID PORT CKPT_DIR

Each process owns 2 of the 4 devices, builds a sharded loader, checks that the shards it
holds are exactly the rows of the single-process global batch, runs a jitted reduction
across both processes, saves the loader state with Orbax and restores it into a fresh
loader.
"""

import sys

import jax


def main(process_id: int, port: str, ckpt: str) -> None:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"localhost:{port}", num_processes=2, process_id=process_id)
    import numpy as np
    import orbax.checkpoint as ocp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxload import PipelineOptions, make_loader
    from jaxload.checkpoint import LoaderRestore, LoaderSave
    from tests.pipeline.test_loader import LENGTHS, WINDOW
    from tests.support.fake_dataset import FakeDataset

    assert jax.process_count() == 2 and jax.device_count() == 4 and jax.local_device_count() == 2
    sharding = NamedSharding(jax.make_mesh((4,), ("data",)), P("data"))
    ds = FakeDataset(LENGTHS, delta_timestamps=WINDOW)
    serial = PipelineOptions(num_workers=0)
    loader = make_loader(ds, global_batch_size=8, seed=1, options=serial, sharding=sharding)
    single = make_loader(
        ds, global_batch_size=8, seed=1, options=serial, host_index=0, host_count=1
    )

    def check(batch, reference):
        for key, value in reference.items():
            if key != "task":
                for shard in batch[key].addressable_shards:
                    assert np.array_equal(np.asarray(shard.data), value[shard.index]), key

    for _ in range(3):
        batch, reference = next(loader), next(single)
        check(batch, reference)
    total = jax.jit(lambda x: x.sum())(batch["index"])  # a computation spanning both processes
    assert int(total) == int(reference["index"].sum())

    with ocp.CheckpointManager(ckpt) as mngr:
        mngr.save(3, args=ocp.args.Composite(loader=LoaderSave(loader)))
        mngr.wait_until_finished()
    fresh = make_loader(ds, global_batch_size=8, seed=1, options=serial, sharding=sharding)
    with ocp.CheckpointManager(ckpt) as mngr:
        mngr.restore(3, args=ocp.args.Composite(loader=LoaderRestore(fresh)))
    check(next(fresh), next(single))
    assert fresh.get_state()["host_count"] == 2
    print(f"OK process {process_id}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
