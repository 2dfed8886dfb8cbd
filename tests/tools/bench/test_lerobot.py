"""The LeRobot reference (jaxload.tools.bench.lerobot): LeRobotDataset in a torch DataLoader
as openpi builds it, lerobot imported lazily with a clear error when it is missing."""

import pytest


@pytest.mark.integration  # with the benchmark harness's tests (tests/tools/test_bench.py)
def test_lerobot_reference_error_names_the_install_script(monkeypatch):
    from jaxload.tools.bench import lerobot as bench_lerobot

    monkeypatch.setattr(bench_lerobot, "lerobot_available", lambda: False)
    with pytest.raises(ImportError, match=r"install_lerobot\.sh"):
        bench_lerobot.import_lerobot_dataset()


def test_a_folder_without_lerobot_metadata_is_refused_before_lerobot_is_imported(tmp_path):
    from jaxload.tools.bench import lerobot as bench_lerobot

    (tmp_path / "meta").mkdir()  # a folder of that shape, without its info.json
    with pytest.raises(FileNotFoundError, match=rf"{tmp_path}: not a LeRobot dataset"):
        bench_lerobot.open_lerobot(tmp_path, {"action": [0.0]})


def test_the_dataloader_is_openpis_shuffled_and_dropping_the_last_batch():
    from jaxload.tools.bench import lerobot as bench_lerobot

    def epoch(seed):
        loader = bench_lerobot.make_dataloader(list(range(10)), batch_size=3, num_workers=0,
                                               seed=seed)  # fmt: skip
        return [b.tolist() for b in loader]

    first = epoch(1)
    assert [len(b) for b in first] == [3, 3, 3]  # 10 samples: the last, short batch dropped
    served = [i for batch in first for i in batch]
    assert len(set(served)) == 9 and served != list(range(9))
    assert epoch(1) == first and epoch(2) != first  # the seed decides the order
    loader = bench_lerobot.make_dataloader(list(range(4)), batch_size=2, num_workers=0)
    repeated = bench_lerobot._repeat(loader)
    assert len([next(repeated) for _ in range(5)]) == 5  # epochs follow without end
    assert bench_lerobot._shutdown(loader) is None  # no worker processes to stop


@pytest.mark.integration
def test_lerobots_dataset_pickles_as_its_arguments_and_is_measured(shared_lerobot):
    import pickle

    from jaxload.tools.bench import lerobot as bench_lerobot

    if not bench_lerobot.lerobot_available():
        pytest.skip("lerobot is not installed (scripts/install_lerobot.sh)")
    root = shared_lerobot / "h264_single"
    windows = {"action": [0.0, 0.1], "observation.image": [-0.1, 0.0]}
    ds = bench_lerobot.open_lerobot(root, windows)
    assert ds.repo_id == "local/h264_single"
    copy = pickle.loads(pickle.dumps(ds))  # what a spawned DataLoader worker gets
    assert copy.dataset is not ds.dataset and (copy.root, copy.delta_timestamps) == (
        str(root),
        windows,
    )
    a, b = ds[17], copy[17]
    assert len(copy) == len(ds) and a.keys() == b.keys()
    assert all((a[k] == b[k]).all() for k in ("action", "observation.image", "index"))
    result = bench_lerobot.measure_lerobot(root, delta_timestamps=windows, num_workers=0,
                                           batch_size=4, seconds=0.3, warmup_s=0.0)  # fmt: skip
    assert result.name == "lerobot" and result.samples_per_s > 0 and result.samples % 4 == 0
    assert result.details["frames_per_sample"] == 2  # its one camera's window
    assert result.details["video_backend"] == "torchcodec"
