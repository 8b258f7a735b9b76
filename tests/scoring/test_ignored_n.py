"""A served policy whose server ignores ``n``: the real ``transformers serve`` (the project's venv has it) answers one
choice per request and logs "Ignoring unsupported fields {'n'}". It serves a text-only tiny Qwen3 here: its
Qwen3-VL processor needs torchvision, which the project's venv lacks. The policy asks for the other samples one at
a time, seeded apart, so K-sample scoring works against it; and a state whose samples fail keeps its greedy metrics
(the project's stand-in server, which fails on request)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import urllib.request

import pytest

from rmsweb_kedro.agents.factory import build_policy
from rmsweb_kedro.measures.scoring import ScoringConfig, rates, score_states
from rmsweb_kedro.models.serving import free_port
from tests.collect.local_openai_server import LocalChatServer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def text_checkpoint(tiny_checkpoint, tmp_path_factory):
    """A tiny text-only Qwen3 with the tiny checkpoint's tokenizer and chat template."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=4096,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    path = tmp_path_factory.mktemp("text_checkpoint")
    Qwen3ForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def transformers_serve(text_checkpoint, tmp_path_factory):
    """``transformers serve CHECKPOINT`` on 127.0.0.1 (stopped at the end): ``(base_url, log path)``."""
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    command = [os.path.join(os.path.dirname(sys.executable), "transformers"), "serve", str(text_checkpoint)]
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with log.open("wb") as out:
        server = subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                assert server.poll() is None, log.read_text()
                time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1", log
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_server_that_ignores_n_still_yields_every_sample(
    transformers_serve, text_checkpoint, tiny_states, caplog
):
    base_url, log = transformers_serve
    endpoint = {"base_url": base_url, "model": str(text_checkpoint), "max_retries": 0}
    policy = build_policy({"kind": "openai", "endpoint": endpoint, "max_new_tokens": 8, "batch_size": 2})
    with caplog.at_level(logging.WARNING, logger="rmsweb_kedro.agents.openai_policy"):
        groups = policy.sample(tiny_states[:3], n=4, greedy=False, temperature=1.0, seed=5, logprobs=False)
    assert [len(g) for g in groups] == [4, 4, 4]
    assert not any(s.fatal for g in groups for s in g)
    assert "Ignoring unsupported fields" in log.read_text() and "'n'" in log.read_text()
    noted = [r for r in caplog.records if "ignores n" in r.getMessage()]
    assert len(noted) == 1  # logged once, not once a state
    scored = score_states(tiny_states[:2], policy, ScoringConfig(k=4, max_new_tokens=8, seed=1))
    assert scored["n_samples"].to_list() == [4, 4] and scored["sampled_actions"].list.len().to_list() == [
        4,
        4,
    ]
    assert scored["env_error"].is_null().all() and scored["sample_error"].is_null().all()
    assert scored["valid_rate"].is_not_null().all()  # k samples scored, none an environment error


def test_failed_samples_never_drop_the_greedy_result(tiny_states):
    with LocalChatServer() as server:  # no model: it answers what it is told
        server.replies = [500, 500]  # the first request (the first state's k samples) fails twice
        endpoint = {"base_url": server.base_url, "model": "m", "max_retries": 1, "backoff_s": 0.01}
        policy = build_policy({"kind": "openai", "endpoint": endpoint, "batch_size": 1})
        server.respond = lambda body: "Action: click(1)"
        scored = score_states(tiny_states[:3], policy, ScoringConfig(k=2, batch_size=3))
    first, *rest = scored.iter_rows(named=True)
    assert first["sample_error"].startswith("endpoint error") and first["env_error"] is None
    assert first["competence"] is None and first["valid"] is True  # the greedy reply is scored
    assert all(row["sample_error"] is None and row["competence"] is not None for row in rest)
    assert rates(scored)["n_states"] == 3  # the state counts in the step metrics
