"""The ``ablations`` pipeline: collection modes, mined vs full RL corpus and Salvage-DS modes, each a namespaced
reuse of the recipe's stages, compared in one table (docs/ablations.md)."""

from rmsweb_kedro.pipelines.ablations.pipeline import Reused, create_pipeline

__all__ = ["Reused", "create_pipeline"]
