"""``sft_data``: successful shortened trajectories -> policy states (STATE_SCHEMA), split by task."""
