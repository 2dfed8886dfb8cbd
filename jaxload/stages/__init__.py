"""Per batch, one stage per module: the read (`read_batch`), the workers' output in
shared memory (`shared_memory_output`), the reader watchdog (`watch_readers`), the
batches opened in the trainer (`open_slots`), global arrays (`to_global`); `pipeline`
puts them together."""
