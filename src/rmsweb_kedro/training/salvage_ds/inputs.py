"""What a Salvage-DS step feeds the model: states prepared once (the policy's prompt, the reference reply with the
anchor's action mask, the mining probe's counts), the rows' screenshots, and the one forward over prompt +
continuation rows that every term's log-probabilities come from (training, pi_old and pi_ref alike)."""

from __future__ import annotations

import torch

from rmsweb_kedro.contracts.actions import Action, matches_any
from rmsweb_kedro.training.salvage_ds.objective import action_token_mask
from rmsweb_kedro.training.sampling import PreparedState


def probe_counts(row: dict, references: list[Action]) -> tuple[int, int]:
    """``(K, right)``: the mining probe's sampled actions of a state (``sampled_actions``: canonical texts, or
    ``<invalid: reason>``; absent or null when the state was not probed) and how many are in the reference set
    (``matches_any``, as the rollout's groups are counted)."""
    from rmsweb_kedro.contracts.actions import ActionParseError, parse_action

    labels = row.get("sampled_actions") or []
    right = 0
    for label in labels:
        if label.startswith("<invalid"):
            continue
        try:
            right += matches_any(parse_action(label), references)
        except ActionParseError:
            raise ValueError(
                f"state {row.get('state_id')!r}: field sampled_actions holds {label!r}, neither an action nor "
                "'<invalid: reason>'"
            ) from None
    return len(labels), right


def prepare_states(states: list[dict], processor, prompt_config) -> list[PreparedState]:
    """STATE_SCHEMA rows with the policy's prompt (``hf_policy.prompt_inputs``, the sampler's) and reference reply."""
    from rmsweb_kedro.agents.hf_policy import prompt_inputs
    from rmsweb_kedro.contracts.prompts import reference_reply
    from rmsweb_kedro.contracts.schema import reference_set

    tokenizer = processor.tokenizer
    end_of_turn = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
    prepared = []
    for row in states:
        references = reference_set(row)
        probe_samples, probe_right = probe_counts(row, references)
        reply = reference_reply(row, prompt_config)
        encoded = tokenizer(reply, add_special_tokens=False, return_offsets_mapping=True)
        mask = action_token_mask(encoded["offset_mapping"], reply)
        prepared.append(
            PreparedState(
                state_id=row["state_id"],
                row=row,
                references=references,
                prompt_ids=prompt_inputs([row], prompt_config, processor)["input_ids"][0].tolist(),
                reply_ids=[*encoded["input_ids"], end_of_turn],
                reply_action_mask=[*mask, 1],  # ending the turn after the action is part of acting
                probe_samples=probe_samples,
                probe_right=probe_right,
            )
        )
    return prepared


def vision_inputs(rows: list[dict], prompt_config, processor) -> dict[str, torch.Tensor]:
    """The image inputs of the prompts of ``rows``, in row order: ``pixel_values`` (patches, C * 2 * 16 * 16) and
    ``image_grid_thw`` (images, 3), what the processor gave the sampler for the same prompts (so a forward over
    their ids sees the same pixels); ``{}`` when the prompts show no screenshot."""
    from PIL import Image

    from rmsweb_kedro.contracts.prompts import build_messages, image_paths

    paths = [path for row in rows for path in image_paths(build_messages(row, prompt_config)[0])]
    if not paths:
        return {}
    images = [Image.open(path).convert("RGB") for path in paths]
    out = processor.image_processor(images=images, return_tensors="pt")
    return {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}


def continuation_logits(
    model,
    prompts: list[list[int]],
    continuations: list[list[int]],
    pad_id: int,
    vision: dict[str, torch.Tensor] | None = None,
    image_token_id: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One forward over prompt + continuation rows: ``(logits (B, C, V), targets (B, C), mask (B, C))`` where
    ``logits[:, t]`` predicts ``targets[:, t]``, the t-th continuation token. Prompts are left-padded and
    continuations right-padded, so the continuations line up and only C + 1 positions of logits are computed
    (the vocabulary of a real model is large). ``vision`` (:func:`vision_inputs` of the rows' states): the
    screenshots the prompts show, passed with ``mm_token_type_ids`` (1 on ``image_token_id``), so the log-probs
    are the policy's given the image."""
    prompt_width = max(len(p) for p in prompts)
    width = max(len(c) for c in continuations)
    ids, attention = [], []
    for prompt, continuation in zip(prompts, continuations, strict=True):
        left, right = prompt_width - len(prompt), width - len(continuation)
        ids.append([pad_id] * left + prompt + continuation + [pad_id] * right)
        attention.append([0] * left + [1] * (len(prompt) + len(continuation)) + [0] * right)
    device = next(model.parameters()).device
    ids_t = torch.tensor(ids, device=device)
    images = {}
    if vision:
        images = {k: v.to(device) for k, v in vision.items()}
        images["mm_token_type_ids"] = (ids_t == image_token_id).long()
    out = model(
        input_ids=ids_t,
        attention_mask=torch.tensor(attention, device=device),
        logits_to_keep=width + 1,
        **images,
    )
    mask = torch.tensor([[1] * len(c) + [0] * (width - len(c)) for c in continuations], device=device)
    return out.logits[:, :-1], ids_t[:, prompt_width:], mask
