"""A Kedro dataset for Hugging Face checkpoint directories (Qwen3-VL model + processor), versioned or not.

Saves ``(model, processor)`` with ``save_pretrained`` (a peft model is saved merged) and loads it back with
:func:`rmsweb_kedro.models.modeling.load_model`, so a catalog entry can also point at a checkpoint a user brings::

    sft_model:
      type: rmsweb_kedro.datasets.checkpoint.CheckpointDataset
      filepath: data/06_models/sft_model
      versioned: true
      load_args: {dtype: auto, device: auto, attn_implementation: sdpa}

With versioning, each save is ``<filepath>/<timestamp>/<name>/`` (Kedro's layout), so runs keep their lineage.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

from kedro.io.core import AbstractVersionedDataset, DatasetError, Version

from rmsweb_kedro.models.modeling import LoadedModel


class CheckpointDataset(AbstractVersionedDataset[LoadedModel, LoadedModel]):
    """A checkpoint directory; the in-memory value is :class:`modeling.LoadedModel` ``(model, processor)``."""

    def __init__(
        self,
        filepath: str,
        load_args: dict[str, Any] | None = None,
        version: Version | None = None,
        metadata: dict[str, Any] | None = None,
    ):
        super().__init__(PurePosixPath(Path(filepath).as_posix()), version)
        self._load_args = dict(load_args or {})
        self.metadata = metadata

    def load(self) -> LoadedModel:
        from rmsweb_kedro.models.modeling import load_model

        path = Path(self._get_load_path().as_posix())
        if not (path / "config.json").exists():
            raise DatasetError(
                f"{path}: no checkpoint here (config.json missing); run the pipeline that saves it"
            )
        model, processor = load_model({"path": str(path), **self._load_args})
        return LoadedModel(model, processor)

    def save(self, data: LoadedModel | tuple[Any, Any]) -> None:
        from rmsweb_kedro.models.modeling import save_checkpoint

        model, processor = data
        path = Path(self._get_save_path().as_posix())
        save_checkpoint(model, processor, path)
        self._invalidate_cache()

    def _exists(self) -> bool:
        try:
            path = self._get_load_path()
        except DatasetError:
            return False
        return Path(path.as_posix(), "config.json").exists()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath), "version": self._version, "load_args": self._load_args}

    def _invalidate_cache(self) -> None:
        self._clear_version_cache()
