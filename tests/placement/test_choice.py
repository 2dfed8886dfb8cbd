"""decode_device="auto" by measurement (jaxload.placement.choice): both sides timed on
the dataset's own batches, the faster path kept and said why.

No GPU here: CPU devices stand in for the GPUs (the "device" path decodes through the same
`DeviceDecoder`), and a backend that slows one side stands in for a slow NVDEC or CPU.
"""

import jax
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jaxload
from jaxload.decode import backend
from jaxload.placement.choice import choose_by_rates, measure_decode_paths
from jaxload.resolution.request import LoaderRequest
from jaxload.resolution.resolve import resolve_read
from tests.decode.test_nvdec import WINDOWS, SlowOnOneSide, two_camera_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return two_camera_dataset(tmp_path_factory.mktemp("choice"))


@pytest.mark.parametrize(
    "cpu, devices, chosen",
    [
        (32964, 4718, "cpu"),  # 96x128 on the H200 host: the CPU readers 7x faster
        (3258, 3293, "cuda"),  # 480x640 there: alike
        (9000, 1000, "cpu"),
        (500, 3000, "cuda"),  # few cores per GPU
    ],
)
def test_the_path_predicted_fastest_is_chosen_and_the_rates_are_said(cpu, devices, chosen):
    device, reasons = choose_by_rates(cpu, devices)
    assert device == chosen
    assert f"-> {chosen!r}" in reasons[0] and f"cpu {cpu:,.0f}" in reasons[0]
    assert {"cpu": cpu, "cuda": devices}[chosen] == max(cpu, devices)  # never the slower
    assert choose_by_rates(1000, 1000)[0] == "cpu"  # a tie: nothing travels compressed


@pytest.mark.integration  # two seconds of timed decoding per case
@pytest.mark.parametrize("slow, chosen", [("devices", "cpu"), ("readers", "device")])
def test_the_measurement_finds_the_slow_side(dataset, slow, chosen):
    """Both sides decode the same first batches for MEASURE_S each; the side slowed by the
    backend (0.5 s per decoder, several times a batch's decode) loses."""
    sharding = NamedSharding(jax.make_mesh((1,), ("data",)), P("data"))
    options = jaxload.PipelineOptions(num_workers=0, decode_threads=1).resolve()
    read = resolve_read(
        LoaderRequest(
            dataset, global_batch_size=8, seed=3, sharding=sharding, delta_timestamps=WINDOWS
        )
    )  # what is read: measured before any loader spec exists
    cameras = tuple(read.datasets[0].camera_keys)
    with backend.use(SlowOnOneSide(slow, delay=0.5)):
        choice = measure_decode_paths(read, cameras, options, 1, device_path="device")
    assert choice.device == chosen, choice
    assert choice.cpu_frames_per_s > 0 and choice.device_frames_per_s > 0
    assert "frames/s on the CPU readers" in choice.describe()
