"""Kedro datasets for Hugging Face checkpoint directories (Qwen3-VL model + processor): one, versioned or not
(:class:`CheckpointDataset`), or one a training seed (:class:`SeedCheckpointsDataset`).

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

import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Any

from kedro.io.core import AbstractDataset, AbstractVersionedDataset, DatasetError, Version

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


class SeedCheckpointsDataset(AbstractDataset[dict[int, LoadedModel], dict[int, Callable[[], LoadedModel]]]):
    """One checkpoint directory a training seed, ``<filepath>/seed_<s>/`` (a run of several seeds of one stage,
    e.g. ``rmsweb_models``). Saves ``{seed: (model, processor)}`` (and removes the folders of seeds not in it, so
    the folder holds one run); loads ``{seed: load}``, each ``load()`` reading that seed's checkpoint when called
    (as Kedro's PartitionedDataset loads lazily), so a caller holds one model at a time::

        rmsweb_models:
          type: rmsweb_kedro.datasets.checkpoint.SeedCheckpointsDataset
          filepath: data/06_models/rmsweb_models
    """

    PREFIX = "seed_"

    def __init__(
        self, filepath: str, load_args: dict[str, Any] | None = None, metadata: dict[str, Any] | None = None
    ):
        self._filepath = Path(filepath)
        self._load_args = dict(load_args or {})
        self.metadata = metadata

    def _seeds(self) -> list[int]:
        if not self._filepath.is_dir():
            return []
        found = [p for p in self._filepath.glob(f"{self.PREFIX}*") if (p / "config.json").exists()]
        return sorted(int(p.name.removeprefix(self.PREFIX)) for p in found)

    def load(self) -> dict[int, Callable[[], LoadedModel]]:
        seeds = self._seeds()
        if not seeds:
            raise DatasetError(
                f"{self._filepath}: no seed_<s>/ checkpoint here (config.json missing); run the pipeline that saves it"
            )
        return {seed: partial(self._load_seed, seed) for seed in seeds}

    def _load_seed(self, seed: int) -> LoadedModel:
        return CheckpointDataset(str(self._filepath / f"{self.PREFIX}{seed}"), self._load_args).load()

    def save(self, data: dict[int, LoadedModel]) -> None:
        if not data:
            raise DatasetError(f"{self._filepath}: no seed to save (an empty run)")
        for seed, model in data.items():
            CheckpointDataset(str(self._filepath / f"{self.PREFIX}{int(seed)}")).save(
                model() if callable(model) else model
            )
        for stale in set(self._seeds()) - {int(seed) for seed in data}:
            shutil.rmtree(self._filepath / f"{self.PREFIX}{stale}")

    def _exists(self) -> bool:
        return bool(self._seeds())

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath), "load_args": self._load_args}
