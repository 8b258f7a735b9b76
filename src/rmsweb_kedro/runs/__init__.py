"""What a run records about itself: the manifest that traces every number to its code, seeds, checkpoints, judges and
hardware (:mod:`.provenance`), MLflow logging (:mod:`.tracking`) and the side-by-side comparison of runs
(:mod:`.compare`, ``python -m rmsweb_kedro.runs.compare``). Imports models and web (for versions) only."""
