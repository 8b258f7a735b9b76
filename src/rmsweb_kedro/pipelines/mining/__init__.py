"""Failure-mode mining of the SFT policy (docs/mining.md)."""

from rmsweb_kedro.pipelines.mining.pipeline import create_pipeline

__all__ = ["create_pipeline"]
