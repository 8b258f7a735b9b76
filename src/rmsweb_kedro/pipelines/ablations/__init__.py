"""The ``ablations`` pipeline: collection modes, mined vs full RL corpus, Salvage-DS modes and parts, and RL rounds,
each a namespaced reuse of the recipe's stages, compared in one table; and ``second_round``, a round more after
the default run (docs/ablations.md)."""

from rmsweb_kedro.pipelines.ablations.pipeline import Reused, create_pipeline, second_round

__all__ = ["Reused", "create_pipeline", "second_round"]
