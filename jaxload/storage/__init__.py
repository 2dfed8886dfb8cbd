"""Datasets in object storage (s3://, gs://, hf://, https://) and remote-read plumbing.

- `object_store`: `ObjectStore`, a dataset at a URL as a `jaxload.format.storage.DatasetStorage`
  (metadata read by name where it lives, records through a `RemoteStore`); `open_storage`.
- `remote`: `RemoteStore`, byte-range reads of verified records (one per process), made of
  `transport` (requests, retries, latency and bandwidth), `offsets` (where records lie),
  `cache` (the furthest-next-use record cache) and `sweep` (how far ahead to fetch).
- `prefetch`: the read stage's `Lookahead`, fetching the next batches' records ahead.
- `options`: `RemoteOptions`; `retry`: the retry policy (shared with the converter);
  `urls`: which paths are URLs, and their fsspec filesystem.
"""
