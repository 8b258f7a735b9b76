"""What a run records about itself: the manifest that traces every number to its code, seeds, checkpoints, judges and
hardware (:mod:`.provenance`), MLflow logging (:mod:`.tracking`), the side-by-side comparison of runs
(:mod:`.compare`, ``python -m rmsweb_kedro.runs.compare``) and the Kedro hooks of every ``kedro run`` that keep
them (:mod:`.hooks`: credentials, provenance, MLflow, shutdown; registered in ``settings.py``). Imports models and
web (for versions) only, besides Kedro."""
