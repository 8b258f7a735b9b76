"""From trajectories to training states: ingest of raw trajectory files with their quarantine (:mod:`.ingest`),
reflection-free shortening (:mod:`.shortening`), policy states and their splits (:mod:`.states`) and argument-swap
augmentation (:mod:`.augmentation`). Imports contracts only."""
