"""Artifacts: what each stage writes and the next reads — the loader types (`Run`, `Sketches`,
`Targets`, `Draw`, `SeedArtifacts`), the content-addressed store (atomic directories, manifests,
verified loads, file locks), the cache keys, and cache administration.

Builders (training, gradients, targets) import this package to write artifacts; attribution and the
checklist only read them. It depends on nothing above it: numpy, json and filelock, no torch."""
