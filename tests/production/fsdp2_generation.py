"""Run by ``test_distributed.py`` under ``accelerate launch`` (cpu_2proc_fsdp2): the policy, sharded by the shared
loop's FSDP2 preparation, generates through the sampler every stage uses (greedy, screenshots on) replies of
different lengths on the two processes, 2 and 6 new tokens, meet at a barrier and train one SFT step. Unless
generation is synced, the process done first reaches the barrier while the other waits for the shards of its next
forward. Each process writes what it generated to ``<output_dir>/generated_<rank>.json``."""

from __future__ import annotations

import json
from pathlib import Path


def main() -> None:
    import polars as pl

    from rmsweb_kedro.agents.hf_policy import sample_replies
    from rmsweb_kedro.contracts.prompts import PromptConfig
    from rmsweb_kedro.models.modeling import load_model
    from rmsweb_kedro.training.launch import read_job
    from rmsweb_kedro.training.loop import LoopConfig, make_accelerator, train_loop
    from rmsweb_kedro.training.sft import SFTCollator, sft_loss

    job = read_job("FSDP2 generation check")
    model, processor = load_model({"path": job["model_dir"]})
    states = pl.read_parquet(job["train_path"]).to_dicts()
    prompt = PromptConfig.model_validate(job["prompt"])
    loop = LoopConfig(output_dir=job["output_dir"], max_steps=1, batch_size=1, warmup_steps=0, eval_every=0,
                      save_checkpoints=False, progress=False)  # fmt: skip
    accelerator = make_accelerator(loop)
    rank = accelerator.process_index

    def rollout(policy, batch):
        ((sample,),) = sample_replies(
            policy, processor, states[rank : rank + 1], prompt, greedy=True, max_new_tokens=2 + 4 * rank
        )
        # a barrier right after: with unsynced generation the process done first would meet the other's next
        # all-gather here (its training forward would silently pair with the other's decoding forwards instead)
        accelerator.wait_for_everyone()
        record = {"distributed_type": str(accelerator.distributed_type), "tokens": len(sample.completion_ids)}
        Path(job["output_dir"], f"generated_{rank}.json").write_text(json.dumps(record))
        return batch

    collate = SFTCollator(processor, prompt, loss_on="assistant")
    train_loop(model, states, collate, sft_loss, loop, accelerator=accelerator, rollout=rollout)


if __name__ == "__main__":
    main()
