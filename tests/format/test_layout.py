"""The content fingerprint, hashed as it is written, is the sha256 of the canonical JSON it
always was (fingerprints of existing datasets, and checkpoints that remember them, stay
valid)."""

import hashlib
import json

import pytest

from jaxload import format as fmt


def _canonical(fps, features, cameras, episodes, records, strings=None):
    """The fingerprint as jaxload computed it before it was streamed."""
    content = {
        "fps": fps,
        "features": {k: f.to_json() for k, f in features.items()},
        "cameras": {k: c.to_json() for k, c in cameras.items()},
        "episodes": [[int(e), int(n), list(t)] for e, n, t in episodes],
        "records": records,
    }
    if strings:
        content["strings"] = {k: [list(v) for v in per_ep] for k, per_ep in strings.items()}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


FEATURES = {
    "observation.state": fmt.Feature("float32", (8,), ["j0", "j1"]),
    "language": fmt.Feature("string", ()),
    "index": fmt.Feature("int64", ()),
}
CAMERAS = {"wrist": fmt.Camera("h264", 96, 128, "yuv420p", 4, 14, "av1")}


@pytest.mark.parametrize(
    "episodes, strings",
    [
        ([], None),
        ([(0, 5, ["pick"]), (3, 1, []), (7, 12, ["place ünïcode", 'a\\"b'])], None),
        ([(0, 2, ["x"]), (1, 3, ["y"])], {"language": [["a", "b"], []], "b": [["é"], ["c"]]}),
        ([(0, 2, ["x"])], {}),
    ],
)
def test_streamed_fingerprint_is_the_canonical_json_hash(episodes, strings):
    streamed = fmt.content_fingerprint(
        30,
        FEATURES,
        CAMERAS,
        iter(episodes),
        "ab" * 32,
        None if strings is None else {k: iter(v) for k, v in strings.items()},
    )
    assert streamed == _canonical(30, FEATURES, CAMERAS, episodes, "ab" * 32, strings)
