"""converters/storage.py: an OUT that cannot be written (a file, under a file, a full or
read-only disk, no permission) is one JaxloadError saying what a rerun does; source and
remote errors, and anything else, pass through unchanged."""

from __future__ import annotations

import errno

import pytest

from jaxload.converters.storage import INTERRUPTED, check_out, storage_errors
from jaxload.errors import JaxloadError, RemoteError, SourceError


def test_check_out(tmp_path):
    check_out(tmp_path / "new" / "ds")
    check_out(tmp_path)  # an existing directory: emptiness is checked elsewhere
    (tmp_path / "f").write_text("")
    with pytest.raises(JaxloadError, match=r"f: is a file, not a directory; nothing was written"):
        check_out(tmp_path / "f")
    with pytest.raises(JaxloadError, match=r"ds: cannot be created under .*/f, a file"):
        check_out(tmp_path / "f" / "sub" / "ds")


@pytest.mark.parametrize(
    "error, said",
    [
        (OSError(errno.ENOSPC, "No space left on device"), "no space left on device"),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), "no space left on device"),
        (RuntimeError("IO error: No space left on device"), "no space left on device"),
        (OSError(errno.EROFS, "Read-only file system"), "out/ds: read-only file system"),
        (PermissionError(errno.EACCES, "Permission denied"), "permission denied"),
    ],
)
def test_what_a_full_or_unwritable_disk_says(error, said):
    with pytest.raises(JaxloadError, match=said) as raised, storage_errors("out/ds"):
        raise error
    assert str(raised.value).endswith(INTERRUPTED) and raised.value.__cause__ is error


def test_a_worker_error_caused_by_a_full_disk_is_found_in_the_chain():
    with pytest.raises(JaxloadError, match="no space left on device"), storage_errors("out"):
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as e:
            raise RuntimeError("worker failed") from e


@pytest.mark.parametrize(
    "error",
    [
        SourceError("src/x.mp4: permission denied"),
        RemoteError("s3://b/x: denied"),
        ValueError("something else"),
    ],
)
def test_other_errors_pass_through(error):
    if isinstance(error, RemoteError):
        error.__cause__ = PermissionError(errno.EACCES, "denied")  # s3fs' own, not the disk's
    with pytest.raises(type(error)) as raised, storage_errors("out"):
        raise error
    assert raised.value is error
