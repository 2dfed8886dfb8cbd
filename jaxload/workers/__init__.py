"""Worker processes: their registry and deaths (`processes`), shared-memory batches
(`shared_batch`), reads on daemon threads (`read_threads`), the `__main__` check
(`main_guard`)."""
