"""Salvage-DS: group-relative RL of the SFT policy on the mined critical states (docs/salvage_ds.md)."""

from rmsweb_kedro.pipelines.salvage_ds.pipeline import create_pipeline

__all__ = ["create_pipeline"]
