"""HFPolicy's two faces and the checkpoint dataset."""

import torch

from rmsweb_kedro.agents.base import Decision
from rmsweb_kedro.agents.hf_policy import HFPolicy
from rmsweb_kedro.contracts.actions import ActionParseError, parse_reply
from rmsweb_kedro.contracts.prompts import build_messages, render_prompt
from rmsweb_kedro.contracts.schema import Observation, Task
from rmsweb_kedro.datasets.checkpoint import CheckpointDataset
from rmsweb_kedro.models.modeling import load_model


def test_sample_returns_n_replies_with_the_models_logprobs(tiny_checkpoint, tiny_states):
    policy = HFPolicy.from_pretrained(tiny_checkpoint, max_new_tokens=12, batch_size=4)
    groups = policy.sample(tiny_states[:3], n=3, greedy=False, temperature=1.0, seed=0)
    assert [len(g) for g in groups] == [3, 3, 3]
    sample = groups[1][0]
    assert len(sample.logprobs) == len(sample.completion_ids) > 0 and all(lp <= 0 for lp in sample.logprobs)
    # the log-probs are the model's own: recompute them with one forward pass over prompt + completion
    ids = torch.tensor([sample.prompt_ids + sample.completion_ids])
    with torch.no_grad():
        logits = (
            policy.model(input_ids=ids).logits[0, len(sample.prompt_ids) - 1 : -1].float().log_softmax(-1)
        )
    recomputed = logits.gather(-1, torch.tensor(sample.completion_ids)[:, None]).squeeze(-1)
    assert torch.allclose(recomputed, torch.tensor(sample.logprobs), atol=1e-4)
    # the prompt is the one training uses
    text = render_prompt(
        build_messages(tiny_states[1], policy.prompt, policy.processor.tokenizer)[0], policy.processor
    )
    assert policy.processor.tokenizer.decode(sample.prompt_ids) == text
    for (
        group
    ) in groups:  # an untrained model mostly writes nonsense: parsed or not, it is reported, never raised
        for s in group:
            if s.action is None:
                assert s.error
                try:
                    parse_reply(s.text)
                    raise AssertionError("a reply that parses was reported as unparsed")
                except ActionParseError:
                    pass


def test_act_follows_the_agent_protocol(tiny_checkpoint):
    policy = HFPolicy.from_pretrained(tiny_checkpoint, max_new_tokens=8)
    task = Task(
        id="t", source="sandbox", site="shop", start_url="http://shop.test/", instruction="Add the mug"
    )
    decision = policy.act(
        task, Observation(url="http://shop.test/", axtree='button "Go" [2]'), [], ["be quick"]
    )
    assert isinstance(decision, Decision)
    assert decision.usage.prompt_tokens > 0 and 0 < decision.usage.completion_tokens <= 8
    assert (decision.action is None) == (decision.error is not None)


def test_checkpoint_dataset_saves_versions_and_loads_them(tmp_path, tiny_checkpoint):
    from kedro.io.core import Version

    model, processor = load_model({"path": str(tiny_checkpoint)})
    dataset = CheckpointDataset(str(tmp_path / "sft_model"), version=Version(None, None))
    assert not dataset.exists()
    dataset.save((model, processor))
    assert dataset.exists() and len(list((tmp_path / "sft_model").iterdir())) == 1
    loaded = CheckpointDataset(str(tmp_path / "sft_model"), version=Version(None, None)).load()
    ids = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        assert torch.equal(loaded.model(input_ids=ids).logits, model(input_ids=ids).logits)
    assert loaded.processor.tokenizer.chat_template == processor.tokenizer.chat_template
