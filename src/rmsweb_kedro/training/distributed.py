"""What the training code asks about its processes, answered once: which process this is and how many there are,
whether the policy's weights are sharded over them, and a flag every process agrees on.

Everything here reads the run's Accelerator (``None``: one plain process), the object the loop and the trainers
already share, so the answers are the same whichever module asks.
"""

from __future__ import annotations


def rank_and_world(accelerator=None) -> tuple[int, int]:
    """This process's index and the number of processes; ``(0, 1)`` without an accelerator."""
    if accelerator is None:
        return 0, 1
    return accelerator.process_index, accelerator.num_processes


def is_sharded(accelerator=None) -> bool:
    """True when no process holds all the weights (FSDP, DeepSpeed): each forward of the policy is then a
    collective every process must join, and generation needs all of them (the loop turns on synced generation)."""
    from accelerate.utils import DistributedType

    if accelerator is None:
        return False
    return accelerator.distributed_type in (DistributedType.FSDP, DistributedType.DEEPSPEED)


def on_every_process(flag: bool, policy) -> bool:
    """``flag`` and-ed over the processes (gloo on the CPU, nccl on GPUs: a tensor on the policy's device)."""
    import torch
    import torch.distributed as dist

    value = torch.tensor([int(flag)], device=next(policy.parameters()).device)
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return bool(value.item())
