"""The policy model and its services: loading and building Qwen3-VL checkpoints (:mod:`.modeling`), how the CPU
computes (:mod:`.numerics`), OpenAI-compatible endpoints (:mod:`.endpoint`), a vLLM server for a checkpoint
(:mod:`.serving`) and the process groups such servers run in (:mod:`.processes`). Imports contracts only."""
