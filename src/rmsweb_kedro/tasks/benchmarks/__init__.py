"""Public benchmark task files (WebVoyager, Online-Mind2Web, WebTailBench) as :class:`~rmsweb_kedro.contracts.schema.Task`
records, and the command that downloads them."""

from rmsweb_kedro.tasks.benchmarks.loaders import (
    BenchmarkFileError,
    LoadResult,
    load_folder,
    load_gaia_web,
    load_online_mind2web,
    load_webtailbench,
    load_webvoyager,
    load_webvoyager_reference_answers,
)

__all__ = [
    "BenchmarkFileError",
    "LoadResult",
    "load_folder",
    "load_gaia_web",
    "load_online_mind2web",
    "load_webtailbench",
    "load_webvoyager",
    "load_webvoyager_reference_answers",
]
