"""converters/engines.py: the output bytes do not depend on the engine (inline, a local
process pool, Ray) or the worker count (planning is tests/converters/test_plan.py).

Ray runs a real local instance (2 CPUs), started once for the module and shut down after.
"""

import pytest

from jaxload.converters.convert import convert
from jaxload.errors import JaxloadError
from tests.converters.conftest import MULTI_FILE_LENGTHS as LENGTHS
from tests.support.helpers import tree_bytes

# ray.init starts its daemons with fork+exec from this (JAX-importing) process: harmless.
# (the tests that convert are `integration`; the fast ones at the end are not)
pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")


@pytest.fixture(scope="module")
def source(multi_file_v3):
    return multi_file_v3


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning")
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def one_worker(source, tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "ds"
    report = convert(source, out, workers=1, shard_bytes=40_000, progress=False)
    assert report.engine == "inline" and report.units == len(LENGTHS)
    return tree_bytes(out)


@pytest.mark.integration
@pytest.mark.processes
def test_two_local_workers_write_the_same_bytes(source, one_worker, tmp_path):
    report = convert(source, tmp_path / "ds", workers=2, shard_bytes=40_000, progress=False)
    assert report.engine == "local" and report.workers == 2
    assert len(report.worker_seconds) == 2  # both processes converted units
    assert tree_bytes(tmp_path / "ds") == one_worker


@pytest.mark.integration
@pytest.mark.processes
def test_ray_writes_the_same_bytes(source, one_worker, ray_session, tmp_path):
    report = convert(source, tmp_path / "ds", engine="ray", shard_bytes=40_000, progress=False)
    assert report.engine == "ray" and report.workers == 2
    assert tree_bytes(tmp_path / "ds") == one_worker
    assert ray_session.is_initialized()  # a session the caller started is left running


@pytest.mark.integration
@pytest.mark.processes
def test_ray_task_errors_come_back_as_clean_messages(source, ray_session, tmp_path):
    import shutil

    src = shutil.copytree(source, tmp_path / "src")
    (src / "videos/observation.images.wrist/chunk-000/file-001.mp4").write_bytes(b"")
    with pytest.raises(JaxloadError) as error:
        convert(src, tmp_path / "ds", engine="ray", progress=False)
    assert error.type is not JaxloadError or "Ray task" not in str(error.value)
    assert "file-001.mp4: empty file (video of episode" in str(error.value)
    assert "RayTaskError" not in str(error.value) and "Traceback" not in str(error.value)
    assert not (tmp_path / "ds").exists()


@pytest.mark.integration
def test_unknown_engine_and_bad_counts(source, tmp_path):
    with pytest.raises(JaxloadError, match="--engine 'spark'"):
        convert(source, tmp_path / "a", engine="spark", progress=False)
    with pytest.raises(JaxloadError, match="--workers 0"):
        convert(source, tmp_path / "b", workers=0, progress=False)
    assert not list(tmp_path.iterdir())


@pytest.mark.integration
def test_units_run_where_the_partial_directory_is_not_visible(
    source, one_worker, tmp_path, monkeypatch
):
    """A Ray node that cannot see OUT's partial directory caches its downloads in its own
    temp directory and sends the unit's records back as bytes. No second machine exists
    here, so the inline engine is made to take that path (with an fsspec source)."""
    import tempfile

    from jaxload.converters import engines

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "node_tmp"))
    (tmp_path / "node_tmp").mkdir()
    returned = []

    def run(self, context, units, on_result):
        for unit in units:
            result = engines.run_unit_anywhere(
                engines.elsewhere(context, shared=False), unit, shared=False
            )
            returned.append(result.part_path is None and len(result.part_bytes) > 0)
            on_result(result)

    monkeypatch.setattr(engines.InlineEngine, "run", run)
    convert(f"file://{source}", tmp_path / "ds", workers=1, shard_bytes=40_000, progress=False)
    assert returned and all(returned)
    assert list((tmp_path / "node_tmp/jaxload-cache").glob("*/videos/*/chunk-000/*.mp4"))
    assert tree_bytes(tmp_path / "ds") == one_worker


# --------------------------------------------------------------------------- fast
@pytest.mark.parametrize("workers", [1, 3])
def test_make_engine_picks_inline_for_one_worker_and_a_pool_otherwise(workers):
    from jaxload.converters import engines

    with engines.make_engine("local", workers) as engine:
        assert engine.name == ("inline" if workers == 1 else "local")
        assert engine.slots == workers  # a pool's processes start only when it runs units
    with pytest.raises(JaxloadError, match="--engine 'dask': choose local or ray"):
        engines.make_engine("dask", 1)
    with pytest.raises(JaxloadError, match="--ray-address needs --engine ray"):
        engines.make_engine("local", 1, ray_address="ray://head:10001")


def test_a_ray_error_is_its_own_jaxload_error_or_one_naming_the_unit():
    from jaxload.converters import engines
    from jaxload.converters.plan import Unit

    unit = Unit(3, (7, 8), 10, 10.0, 0)

    class TaskError(Exception):
        def __init__(self, cause):
            super().__init__("wrapped")
            self.cause = cause

    own = JaxloadError("file-001.mp4: empty file")
    assert engines._unwrap_ray_error(TaskError(own), unit) is own
    other = engines._unwrap_ray_error(TaskError(ValueError("x")), unit)
    assert str(other) == "Ray task for unit 3 (episodes 7..8) failed: TaskError: wrapped"
    assert isinstance(other.__cause__, TaskError)
