"""Run by tests/format/test_open_shards.py in a subprocess whose open-files limit it lowers:
`python open_files_child.py read|exhaust DATASET LIMIT` prints one JSON line.

* `read`: a shuffled epoch through 2 worker processes; after every batch, the descriptors
  each process holds (all of them, and those on the dataset's shards).
* `exhaust`: every descriptor taken while a dataset is open; what reading a new shard
  raises then, with readers in the pool to close and without; and make_loader's check of
  a limit too low for its read threads, or for its worker processes.
* `freed`: every descriptor taken, and one freed right after ArrayRecord failed to open a
  shard (as another read thread closing its idle readers would): what the read gives.
"""

import json
import os
import resource
import sys


def descriptors(pid: int, data_dir: str) -> tuple[int, int]:
    """(open files, of them shard files under `data_dir`) of process `pid`."""
    shards = total = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        total += 1
        shards += target.startswith(data_dir) and target.endswith(".array_record")
    return total, shards


def read(path: str) -> dict:
    import psutil

    import jaxload
    from jaxload.workers.processes import worker_pids

    loader = jaxload.make_loader(
        path,
        global_batch_size=50,
        seed=3,
        num_epochs=1,
        options=jaxload.PipelineOptions(num_workers=2, read_threads=2),
    )
    me, data_dir = psutil.Process(), os.path.join(os.path.realpath(path), "data")
    peak: dict[int, list[int]] = {}
    frames = []
    for batch in loader:
        frames += zip(batch["episode_index"].tolist(), batch["frame_index"].tolist())
        # The trainer, its children (resource tracker, fork server) and the workers (the
        # fork server's children, jaxload.workers.fork_server).
        for pid in [me.pid, *(child.pid for child in me.children()), *worker_pids()]:
            try:
                counts = descriptors(pid, data_dir)
            except OSError:
                continue
            old = peak.setdefault(pid, [0, 0])
            peak[pid] = [max(a, b) for a, b in zip(old, counts)]
    loader.close()
    return {"frames": frames, "peak": peak}


def exhaust(path: str) -> dict:
    import jaxload
    from jaxload.format import open_shards

    ds = jaxload.open(path)
    ds[0]
    taken, result = [], {}

    def take_every_descriptor():
        try:
            while True:
                taken.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass

    take_every_descriptor()
    ds[len(ds) // 2]  # the pool closes an idle reader to open this one
    result["recovered"] = True
    open_shards.READERS.drop(lambda key: True)  # none left to close
    take_every_descriptor()
    try:
        ds[len(ds) - 1]
    except Exception as e:
        result["error"] = [type(e).__name__, str(e)]
    for fd in taken:
        os.close(fd)
    resource.setrlimit(resource.RLIMIT_NOFILE, (70, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    try:
        jaxload.make_loader(
            path, global_batch_size=8, options=jaxload.PipelineOptions(read_threads=4)
        )
    except Exception as e:
        result["too_low"] = [type(e).__name__, str(e)]
    try:  # enough for one read thread, not for 8 workers' pipes and semaphores
        jaxload.make_loader(
            path,
            global_batch_size=8,
            options=jaxload.PipelineOptions(read_threads=1, num_workers=8),
        )
    except Exception as e:
        result["too_low_for_workers"] = [type(e).__name__, str(e)]
    return result


def freed(path: str) -> dict:
    import types

    import jaxload
    from jaxload.format import shards

    ds = jaxload.open(path)
    ds[0]
    taken = []
    try:
        while True:
            taken.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        pass

    def open_after_a_descriptor_is_freed(*args):
        # Between ArrayRecord's failed open and jaxload asking the OS why: the interleaving
        # of two read threads, arranged (the files, the reader and the limit are real).
        if taken:
            os.close(taken.pop())
        return os.open(*args)

    shards.os = types.SimpleNamespace(**{**vars(os), "open": open_after_a_descriptor_is_freed})
    try:
        frame = ds[len(ds) - 1]["frame_index"]
        return {"read": int(frame)}
    except Exception as e:
        return {"error": [type(e).__name__, str(e)]}
    finally:
        shards.os = os


if __name__ == "__main__":
    from absl import flags

    flags.FLAGS.mark_as_parsed()
    what, dataset, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
    resource.setrlimit(
        resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    )
    print(json.dumps({"read": read, "exhaust": exhaust, "freed": freed}[what](dataset)))
