"""Shared model fixtures (a saved tiny Qwen3-VL checkpoint); owned by the model/SFT area."""
