"""The loader: what is read (`sources`), how (`options`), the per-batch read
(`read_batch`), the Grain stages (`stages`), hosts and sharding (`hosts`), the batch
layout of mixtures (`batch_schema`), worker shared memory (`shared_batch`), where video is
decoded (`decode_device`, `machine`), and `make_loader`/`Loader` (`loader`)."""
