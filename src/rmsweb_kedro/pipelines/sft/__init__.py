"""``sft``: build (or load) the base model and fine-tune it on the ``sft_data`` states with the shared loop."""

from rmsweb_kedro.pipelines.sft.pipeline import create_pipeline

__all__ = ["create_pipeline"]
