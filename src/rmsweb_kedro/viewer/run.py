"""A run's outputs as the viewer reads them: the catalog's files and the parameters naming the screenshot folders,
resolved for a Kedro environment, with tables scanned lazily (polars); the only files it hands out are the PNG
screenshots inside those folders (no checkpoint, table or log under ``data/``)."""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

logger = logging.getLogger(__name__)

#: The tables whose presence says a stage ran (catalog names); a tab with none of them says "not in this run".
TABLES = {
    "collection": ("collection_log",),
    "mining": ("critical_states", "mining_offline_probes", "mining_online_probes"),
    "salvage_ds": ("salvage_ds_metrics",),
    "evaluation": ("online_episodes",),
    "live": ("live_results",),
}


class MissingColumns(LookupError):
    """A table of this run lacks columns a view needs (a run written by an older version of the schema)."""

    def __init__(self, table: str, path: Path, missing: list[str]):
        self.table, self.missing = table, missing
        super().__init__(
            f"{table} ({path}) has no column {', '.join(missing)}: it was written by an older version of the "
            "project; re-run the stage that writes it to see this view"
        )


@dataclass(frozen=True)
class Screenshot:
    """A screenshot a page shows: its URL on the viewer, its size, or why it cannot be shown (``problem``)."""

    url: str | None
    width: int = 0
    height: int = 0
    problem: str | None = None
    file: Path | None = None  # where it is on disk (the export inlines it)


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG header (24 bytes read); ValueError when the file is not a PNG."""
    with path.open("rb") as handle:
        head = handle.read(24)
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise ValueError("not a PNG file")
    return struct.unpack(">II", head[16:24])


class Run:
    """The outputs of one run of the project at ``project`` in Kedro environment ``env`` (its catalog and
    parameters as ``kedro run --env <env>`` resolves them). Read-only: nothing here writes."""

    def __init__(
        self, project: str | Path, env: str | None = None, runtime_params: dict[str, Any] | None = None
    ):
        from rmsweb_kedro.settings import CONFIG_LOADER_ARGS, ProjectConfigLoader

        self.project = Path(project).resolve()
        loader = ProjectConfigLoader(
            str(self.project / "conf"), **CONFIG_LOADER_ARGS, env=env, runtime_params=runtime_params or {}
        )
        self.env = env or CONFIG_LOADER_ARGS["default_run_env"]
        self.catalog: dict[str, Any] = dict(loader["catalog"])
        self.params: dict[str, Any] = dict(loader["parameters"])
        #: name -> folder the screenshots of a stage's table are relative to (the only folders files come from;
        #: not ``data/`` as a whole, which holds checkpoints, raw tables and logs)
        self.roots: dict[str, Path] = {
            "raw": self._path(self._param("collect", "raw_root") or "data/01_raw/trajectories"),
            "evaluate": self._path(
                self._param("evaluate", "online", "episodes_root") or "data/07_model_output/evaluate/episodes"
            ),
            "mining": self._path(
                self._param("mining", "online", "screenshot_root")
                or "data/07_model_output/mining/online_screenshots"
            ),
            "live": self._path(self._param("live", "output_dir") or "data/07_model_output/live"),
        }
        self._frames: dict[str, pl.DataFrame] = {}

    def _param(self, *keys: str) -> Any:
        value: Any = self.params
        for key in keys:
            if not isinstance(value, dict) or key not in value:
                return None
            value = value[key]
        return value

    def _path(self, path: str | Path) -> Path:
        path = Path(path)
        return (path if path.is_absolute() else self.project / path).resolve()

    def filepath(self, name: str) -> Path | None:
        """The file of catalog entry ``name``, or None when the catalog has no file for it."""
        entry = self.catalog.get(name)
        if not isinstance(entry, dict) or "filepath" not in entry:
            return None
        return self._path(entry["filepath"])

    def has(self, name: str) -> bool:
        path = self.filepath(name)
        return path is not None and path.exists()

    def ran(self, tab: str) -> bool:
        """Whether any table of ``tab`` is in this run."""
        return any(self.has(name) for name in TABLES[tab])

    def scan(self, name: str, columns: list[str] | tuple[str, ...] = ()) -> pl.LazyFrame | None:
        """Catalog table ``name`` as a lazy scan (parquet or csv), None when the run has no such file; raises
        :class:`MissingColumns` when it lacks one of ``columns``."""
        path = self.filepath(name)
        if path is None or not path.exists():
            return None
        frame = pl.scan_csv(path) if path.suffix == ".csv" else pl.scan_parquet(path)
        missing = [c for c in columns if c not in frame.collect_schema()]
        if missing:
            raise MissingColumns(name, path, missing)
        return frame

    def json(self, name: str) -> Any:
        """A JSON catalog entry's value, or None when it is not in this run."""
        import json

        path = self.filepath(name)
        if path is None or not path.exists():
            return None
        return json.loads(path.read_text(encoding="utf-8"))

    # ------------------------------------------------------------------ files

    def resolve(self, root: str, relative: str) -> Path:
        """The screenshot ``relative`` under screenshot folder ``root``; PermissionError for an unknown root, a
        path that leaves it (``..``, an absolute path, a link out) or a file that is not a ``.png``."""
        if root not in self.roots:
            raise PermissionError(
                f"unknown screenshot folder {root!r}; known: {', '.join(sorted(self.roots))}"
            )
        base = self.roots[root]
        if not relative or Path(relative).is_absolute() or "\\" in relative:
            raise PermissionError(f"{relative!r} is not a path inside the {root} screenshot folder")
        path = (base / relative).resolve()
        if not path.is_relative_to(base):
            raise PermissionError(f"{relative!r} leaves the {root} screenshot folder ({base})")
        if path.suffix.lower() != ".png":  # the folders also hold raw trajectories (JSONL) and other outputs
            raise PermissionError(f"{relative!r} is not a screenshot (.png)")
        return path

    def screenshot(self, root: str, relative: str | None) -> Screenshot:
        """What a page shows for a step's screenshot: its URL and size, or the reason it cannot be shown."""
        if not relative:
            return Screenshot(None, problem="no screenshot was kept for this step")
        from urllib.parse import urlencode

        try:
            path = self.resolve(root, relative)
        except PermissionError as err:
            return Screenshot(None, problem=f"refused: {err}")
        if not path.exists():
            return Screenshot(None, problem=f"screenshot missing: {relative} is not under {self.roots[root]}")
        try:
            width, height = png_size(path)
        except (OSError, ValueError) as err:
            return Screenshot(None, problem=f"screenshot unreadable: {relative}: {err}")
        return Screenshot(f"/file?{urlencode({'root': root, 'path': relative})}", width, height, file=path)

    def screenshot_of_project_path(self, relative: str) -> Screenshot:
        """A screenshot named from the project folder: shown from the data folder that holds it, if any."""
        path = (self.project / relative).resolve()
        for root, base in self.roots.items():
            if path.is_relative_to(base):
                return self.screenshot(root, path.relative_to(base).as_posix())
        return Screenshot(None, problem=f"refused: {relative!r} is in none of the run's data folders")
