"""The raw trajectories dataset: a PartitionedDataset whose empty (or not yet created) folder is no files."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kedro_datasets.partitions import PartitionedDataset


class RawTrajectoriesDataset(PartitionedDataset):
    """``partitions.PartitionedDataset`` that loads an empty folder as ``{}`` instead of raising.

    Before ``collect`` has written anything (or when a user clears the folder) the ``trajectories`` pipeline
    must still run and write empty tables with the right schemas.
    """

    def load(self) -> dict[str, Callable[[], Any]]:
        self._invalidate_caches()
        if not self._list_partitions():
            return {}
        return super().load()
