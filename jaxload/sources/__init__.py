"""What a loader reads: one `DatasetSource` per dataset (`source`), each source's windows
in frames at its own fps (`windows`). Below `transforms/` and `resolution/`, so anything
that takes "a dataset or a source" imports it from here."""
