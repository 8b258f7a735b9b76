"""The collect pipeline: trajectory collection with reflection-conditioned retries (docs/collect.md)."""

from rmsweb_kedro.pipelines.collect.pipeline import create_pipeline

__all__ = ["create_pipeline"]
