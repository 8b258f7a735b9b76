"""A Kedro dataset over one benchmark task file: ``load()`` gives its :class:`~.loaders.LoadResult` (accepted
``Task`` records and quarantined rows), so the ``live`` pipeline reads benchmark files from catalog entries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kedro.io import AbstractDataset, DatasetError

from rmsweb_kedro.tasks.benchmarks import loaders

BENCHMARKS = ("webvoyager", "gaia_web", "online_mind2web", "webtailbench")


class BenchmarkTasksDataset(AbstractDataset[None, loaders.LoadResult]):
    """Read-only: a WebVoyager (with its reference-answer file), GAIA-web, Online-Mind2Web or WebTailBench task
    file in its public format, through the project's loaders (validation and quarantine included)."""

    def __init__(
        self,
        benchmark: str,
        filepath: str,
        reference_filepath: str | None = None,
        start_url: str = loaders.DEFAULT_WEBTAILBENCH_START_URL,
        metadata: dict[str, Any] | None = None,
    ):
        if benchmark not in BENCHMARKS:
            raise DatasetError(f"benchmark {benchmark!r} is not one of {BENCHMARKS}")
        self.benchmark = benchmark
        self.filepath = filepath
        self.reference_filepath = reference_filepath
        self.start_url = start_url
        self.metadata = metadata

    def load(self) -> loaders.LoadResult:
        if not Path(self.filepath).is_file():
            raise DatasetError(
                f"{self.benchmark} task file {self.filepath} is missing: fetch the files with "
                "`python -m rmsweb_kedro.tasks.benchmarks download --dest data/01_raw/benchmarks`"
            )
        if self.benchmark == "webvoyager":
            reference = None
            if self.reference_filepath and Path(self.reference_filepath).is_file():
                reference = loaders.load_webvoyager_reference_answers(self.reference_filepath)
            return loaders.load_webvoyager(self.filepath, reference)
        if self.benchmark == "gaia_web":
            return loaders.load_gaia_web(self.filepath)
        if self.benchmark == "online_mind2web":
            return loaders.load_online_mind2web(self.filepath)
        return loaders.load_webtailbench(self.filepath, start_url=self.start_url)

    def save(self, data: loaders.LoadResult) -> None:
        raise DatasetError("benchmark task files are read-only (the download command writes them)")

    def _exists(self) -> bool:
        return Path(self.filepath).is_file()

    def _describe(self) -> dict[str, Any]:
        return {
            "benchmark": self.benchmark,
            "filepath": self.filepath,
            "reference_filepath": self.reference_filepath,
        }
