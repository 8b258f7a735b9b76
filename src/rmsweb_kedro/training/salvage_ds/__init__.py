"""Salvage-DS: group-relative RL at the level of one action, with a gate, dynamic sampling and an action-only anchor
(docs/salvage_ds.md). One module a job, read in this order:

- ``objective.py``: the maths (module docstring), the table of modes (``MODES``), the symbols
  (``SalvageDSParams``), rewards, group statistics, the gate, advantages, the per-token terms, L and the anchor's
  token mask;
- ``pool.py``: the states a run draws its groups from (``GroupPool``: rounds, saturation, the budget, each
  process's shard);
- ``inputs.py``: what a step feeds the model (``prepare_states``: prompt, reference reply and anchor mask once a
  state; ``continuation_logits``: the one forward every term's log-probabilities come from);
- ``step.py``: the shared loop's ``rollout`` and ``loss_fn`` (``SalvageDSStep``: sample, decide, assemble,
  freeze; then L);
- ``run.py``: the dev evaluation, ``train_salvage_ds`` and the launched entry point (``python -m
  rmsweb_kedro.training.salvage_ds --job JOB.json``, ``__main__.py``).

Where the groups come from (the ``hf`` and ``served`` samplers) is ``training/sampling.py``. The names below, what
a run's caller needs, can be imported from here; the terms of L from ``objective``.
"""

from rmsweb_kedro.training.salvage_ds.inputs import prepare_states
from rmsweb_kedro.training.salvage_ds.objective import MODES, REJECT_REASONS, Mode, SalvageDSParams
from rmsweb_kedro.training.salvage_ds.run import (
    GROUP_LOG,
    SalvageDSJob,
    competence_eval_fn,
    dev_eval_fn,
    evaluate_competence,
    train_job,
    train_salvage_ds,
)
from rmsweb_kedro.training.salvage_ds.step import SalvageDSStep

__all__ = [
    "GROUP_LOG",
    "MODES",
    "REJECT_REASONS",
    "Mode",
    "SalvageDSJob",
    "SalvageDSParams",
    "SalvageDSStep",
    "competence_eval_fn",
    "dev_eval_fn",
    "evaluate_competence",
    "prepare_states",
    "train_job",
    "train_salvage_ds",
]
