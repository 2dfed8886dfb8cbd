"""The loader: what is read (`sources`, each source's windows at its fps in
`source_windows`, image transforms per source and for the loader in `image_transforms`),
how (`options`), the per-batch read
(`read_batch`), the Grain stages (`stages`), hosts and sharding (`hosts`), the batch
layout of mixtures (`batch_schema`), worker shared memory (`shared_batch`), where video is
decoded (`decode_device`, `machine`), and `make_loader`/`Loader` (`loader`)."""
