"""The `Loader` (`loader`): iterates the global batches a `LoaderSpec` defines
(jaxload.resolution), running the per-batch stages (jaxload.stages) in worker processes
(jaxload.workers), with exact, elastic state."""
