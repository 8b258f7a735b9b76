"""Salvage-DS: group-relative RL of the SFT policy on the mined critical states (docs/salvage_ds.md)."""
