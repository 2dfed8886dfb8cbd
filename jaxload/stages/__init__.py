"""Per batch: the read stage (`read_batch`) and the Grain pipeline around it
(`pipeline`)."""
