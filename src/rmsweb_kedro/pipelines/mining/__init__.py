"""Failure-mode mining of the SFT policy (docs/mining.md)."""
