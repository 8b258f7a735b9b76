"""Kedro datasets of the project: checkpoint directories (:mod:`.checkpoint`), the run manifest (:mod:`.manifest`)
and partitioned raw trajectory files (:mod:`.raw_trajectories`)."""
