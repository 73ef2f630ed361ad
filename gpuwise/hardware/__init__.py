"""Hardware layer: the GPU table and the cloud price catalog (data, typed records, loaders)."""
