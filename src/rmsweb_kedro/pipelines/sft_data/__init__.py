"""``sft_data``: successful shortened trajectories -> policy states (STATE_SCHEMA), split by task into
train, val and the probe pool mining probes."""

from rmsweb_kedro.pipelines.sft_data.pipeline import create_pipeline

__all__ = ["create_pipeline"]
