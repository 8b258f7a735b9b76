"""One reply length wherever the policy replies: every ``max_new_tokens`` of the resolved parameters (SFT's accuracy
states, mining's scoring, Salvage-DS's sampling, evaluate and live, and every ablation variant built from them) is
globals.yml's ``reply_max_new_tokens``, in each environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rmsweb_kedro.settings import CONFIG_LOADER_ARGS, CONFIG_LOADER_CLASS

CONF = Path(__file__).resolve().parents[2] / "conf"

#: The stages that decode the policy; each must be found, so the walk cannot pass on an empty config.
STAGES = {
    "sft.accuracy_max_new_tokens",
    "mining.scoring.max_new_tokens",
    "salvage_ds.algorithm.max_new_tokens",
    "evaluate.policy.max_new_tokens",
}


def _reply_lengths(params: Any, path: str = "") -> dict[str, Any]:
    """Every key ending in ``max_new_tokens``, by dotted path."""
    if not isinstance(params, dict):
        return {}
    found = {}
    for key, value in params.items():
        dotted = f"{path}.{key}" if path else key
        if key.endswith("max_new_tokens"):
            found[dotted] = value
        found |= _reply_lengths(value, dotted)
    return found


@pytest.mark.parametrize(("env", "expected"), [(None, 48), ("experiment", 48), ("production", 256)])
def test_every_stage_replies_the_global_length(env, expected):
    loader = CONFIG_LOADER_CLASS(conf_source=str(CONF), env=env, **CONFIG_LOADER_ARGS)
    assert loader["globals"]["reply_max_new_tokens"] == expected
    lengths = _reply_lengths(loader["parameters"])
    assert STAGES <= set(lengths)
    # the ablation variants' stages too (their ${merge:...} of the stage's parameters)
    assert "ablations.rl_salvage_ds.salvage_ds.algorithm.max_new_tokens" in lengths
    assert {path: n for path, n in lengths.items() if n != expected} == {}
