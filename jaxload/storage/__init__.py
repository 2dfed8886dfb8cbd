"""Datasets in object storage (s3://, gs://, hf://, https://) and remote-read plumbing.

- `urls`: which paths are URLs, and their fsspec filesystem.
- `retry`: the retry policy for remote calls (shared with the converter).
- `remote`: `RemoteStore`, byte-range reads of verified records, and `RemoteOptions`.
- `cache`: the furthest-next-use record cache (and a policy simulator).
- `prefetch`: fetching the next batches' records ahead, from the known order.
- `files`: a remote dataset as the format reader's `DatasetFiles`.
"""
