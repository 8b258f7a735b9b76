"""The ``evaluate`` pipeline: offline step metrics, online success, comparison table, plots and report."""

from rmsweb_kedro.pipelines.evaluate.pipeline import create_pipeline

__all__ = ["create_pipeline"]
