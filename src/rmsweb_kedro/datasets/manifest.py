"""The ``run_manifest`` dataset: a JSON file the provenance hook writes (``runs.hooks.ProvenanceHooks``), read by the report.

Loading gives ``None`` when no ``kedro run`` wrote the file (a pipeline run by hand with a ``SequentialRunner``,
a notebook), and the report then says that the manifest is missing rather than failing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kedro.io import AbstractDataset


class RunManifestDataset(AbstractDataset[dict[str, Any], dict[str, Any] | None]):
    def __init__(self, filepath: str, metadata: dict[str, Any] | None = None):
        self._filepath = Path(filepath)
        self.metadata = metadata

    def load(self) -> dict[str, Any] | None:
        if not self._filepath.is_file():
            return None
        return json.loads(self._filepath.read_text())

    def save(self, data: dict[str, Any]) -> None:
        self._filepath.parent.mkdir(parents=True, exist_ok=True)
        self._filepath.write_text(json.dumps(data, indent=2) + "\n")

    def _exists(self) -> bool:
        return self._filepath.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath)}
