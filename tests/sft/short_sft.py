"""A short SFT in a process of its own, so the kernel pins (models/numerics.py) and torch's threads are read at its start:
``python -m tests.sft.short_sft CHECKPOINT OUTPUT_DIR [THREADS]`` trains 4 steps of the embedded default's
settings (``mixed_precision: auto``, observation tokens in the loss, reply weight 4) on the test fixtures' states,
saves the checkpoint and prints ``RESULT {"sha256": ..., "capability": ...}``."""

import json
import sys


def main(checkpoint: str, output_dir: str, threads: int | None = None) -> None:
    import torch

    from rmsweb_kedro.models.modeling import load_model, save_checkpoint
    from rmsweb_kedro.runs.provenance import directory_sha256
    from rmsweb_kedro.training.sft import SFTConfig, run_sft
    from tests.fixtures_model import make_states

    if threads:
        torch.set_num_threads(threads)
    model, processor = load_model({"path": checkpoint})
    config = SFTConfig(
        loop={"output_dir": f"{output_dir}/run", "batch_size": 8, "warmup_steps": 1, "max_steps": 4,
              "eval_every": 0, "save_every": 0, "save_checkpoints": False, "resume": False, "seed": 0,
              "progress": False},
        loss_on="all",
        reply_weight=4.0,
    )  # fmt: skip
    model = run_sft(model, processor, make_states(n_tasks=16), [], config).model
    save_checkpoint(model, processor, f"{output_dir}/saved")
    result = {
        "sha256": directory_sha256(f"{output_dir}/saved")[0],
        "capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
    }
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else None)
