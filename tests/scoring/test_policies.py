"""The two policy kinds on the same tiny checkpoint: ``hf`` in this process and ``openai`` against the project's
local OpenAI-compatible server (a stand-in speaking vLLM's protocol: vLLM itself needs a GPU). Greedy scoring gives
the same table through both; the server answers ``n`` samples and token log-probabilities as vLLM does."""

from __future__ import annotations

import polars as pl
import pytest

from rmsweb_kedro.agents.factory import build_policy
from rmsweb_kedro.measures.scoring import SCORED_SCHEMA, ScoringConfig, rates, score_states
from tests.collect.local_openai_server import LocalChatServer

pytestmark = pytest.mark.slow
MAX_TOKENS = 10


@pytest.fixture(scope="module")
def served(tiny_checkpoint):
    with LocalChatServer(tiny_checkpoint) as server:
        yield server


def openai_policy(server: LocalChatServer, checkpoint, **spec):
    endpoint = {"base_url": server.base_url, "model": server.model_name, "max_retries": 1, "backoff_s": 0.01}
    settings = {
        "kind": "openai",
        "endpoint": endpoint,
        "tokenizer": str(checkpoint),
        "max_new_tokens": MAX_TOKENS,
    }
    return build_policy(settings | spec)


def test_greedy_scores_are_the_same_in_process_and_served(served, tiny_checkpoint, tiny_states):
    states = tiny_states[:6]
    config = ScoringConfig(max_new_tokens=MAX_TOKENS, batch_size=3)
    local = build_policy({"kind": "hf", "max_new_tokens": MAX_TOKENS, "device": "cpu"}, tiny_checkpoint)
    in_process = score_states(states, local, config)
    served.requests.clear()
    remote = score_states(states, openai_policy(served, tiny_checkpoint), config)
    assert in_process.schema == remote.schema == SCORED_SCHEMA and in_process.height == 6
    # the same prompt (page tree cut by the checkpoint's tokenizer), the same greedy reply, the same scores
    assert remote.to_dicts() == in_process.to_dicts()
    assert rates(remote) == rates(in_process)
    assert len(served.requests) == 6 and {r["temperature"] for r in served.requests} == {0.0}


def test_n_samples_with_log_probabilities_and_seeds(served, tiny_checkpoint, tiny_states):
    policy = openai_policy(served, tiny_checkpoint)
    served.requests.clear()
    groups = policy.sample(tiny_states[:2], n=3, greedy=False, temperature=1.5, seed=11, logprobs=True)
    assert [len(g) for g in groups] == [3, 3]
    assert [(r["n"], r["seed"], r["logprobs"]) for r in served.requests] == [
        (3, 11, True),
        (3, 12, True),
    ] or [(r["n"], r["seed"], r["logprobs"]) for r in served.requests] == [
        (3, 12, True),
        (3, 11, True),
    ]  # two requests in flight at once
    for sample in (s for g in groups for s in g):
        assert sample.completion_tokens == len(sample.logprobs) > 0
        assert all(lp <= 0.0 for lp in sample.logprobs)
        assert sample.prompt_tokens > 50 and not sample.fatal
    assert len({s.text for g in groups for s in g}) > 1  # sampled at temperature 1.5, not one greedy reply
    again = policy.sample(tiny_states[:2], n=3, greedy=False, temperature=1.5, seed=11, logprobs=True)
    assert [[s.text for s in g] for g in again] == [[s.text for s in g] for g in groups]  # seeded


def test_served_log_probabilities_are_the_local_models(served, tiny_checkpoint, tiny_states):
    local = build_policy({"kind": "hf", "max_new_tokens": MAX_TOKENS, "device": "cpu"}, tiny_checkpoint)
    mine = local.sample(tiny_states[:2], n=1, greedy=True, logprobs=True)
    theirs = openai_policy(served, tiny_checkpoint).sample(tiny_states[:2], n=1, greedy=True, logprobs=True)
    for (a,), (b,) in zip(mine, theirs, strict=True):
        assert a.text == b.text and len(a.logprobs) == len(b.logprobs) == len(a.completion_ids)
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-4)


def test_k_samples_are_scored_through_the_server(served, tiny_checkpoint, tiny_states):
    served.requests.clear()
    config = ScoringConfig(k=2, max_new_tokens=MAX_TOKENS, batch_size=4, seed=3)
    scored = score_states(tiny_states[:3], openai_policy(served, tiny_checkpoint), config)
    assert scored["n_samples"].to_list() == [2, 2, 2]
    assert scored["sampled_actions"].list.len().to_list() == [2, 2, 2]
    assert scored["competence"].is_between(0, 1).all() and scored["valid_rate"].is_between(0, 1).all()
    sampled = [r for r in served.requests if r.get("n") == 2]
    assert len(sampled) == 3 and {r["seed"] for r in sampled} == {3, 4, 5}  # seed + index of the state
    assert "logprobs" not in sampled[0]  # scoring does not pay for log-probabilities


def test_a_server_that_keeps_failing_is_an_environment_error(tiny_states):
    with LocalChatServer() as server:  # no model: it answers what it is told
        server.replies = [500, 500]  # the first state's two tries
        endpoint = {"base_url": server.base_url, "model": "m", "max_retries": 1, "backoff_s": 0.01}
        policy = build_policy({"kind": "openai", "endpoint": endpoint, "batch_size": 1})
        server.respond = lambda body: "Action: click(1)"
        scored = score_states(tiny_states[:3], policy, ScoringConfig(batch_size=3))
    first, *rest = scored.iter_rows(named=True)
    assert first["env_error"].startswith("endpoint error") and first["failure_mode"] == "environment_error"
    assert all(row["env_error"] is None for row in rest)
    assert rates(scored)["n_states"] == 2  # the failed state counts in no rate


def test_policy_spec_errors_name_what_is_missing(tmp_path):
    with pytest.raises(ValueError, match="policy: kind 'openai' needs an 'endpoint'"):
        build_policy({"kind": "openai"})
    with pytest.raises(ValueError, match="policy kind 'hf' needs a checkpoint directory"):
        build_policy({"kind": "hf"}, tmp_path / "missing")


def test_scored_table_round_trips_through_parquet(served, tiny_checkpoint, tiny_states, tmp_path):
    scored = score_states(tiny_states[:2], openai_policy(served, tiny_checkpoint), ScoringConfig(k=1))
    scored.write_parquet(tmp_path / "scored.parquet")
    assert pl.read_parquet(tmp_path / "scored.parquet").equals(scored)


def test_a_policy_acts_as_agent_and_as_teacher_in_either_kind(served, tiny_checkpoint, tiny_states):
    from rmsweb_kedro.agents.factory import teacher_factory
    from rmsweb_kedro.contracts.schema import Observation, Task

    state = tiny_states[0]
    task = Task(id="t", source="user", site="shop", start_url=state["url"], instruction=state["instruction"])
    observation = Observation(url=state["url"], title="Shop", axtree=state["axtree"])
    endpoint = {"base_url": served.base_url, "model": served.model_name, "max_tokens": MAX_TOKENS}
    teachers = {
        kind: teacher_factory({"kind": "policy", "policy": spec, "checkpoint": str(tiny_checkpoint)})(0)
        for kind, spec in {
            "hf": {"kind": "hf", "max_new_tokens": MAX_TOKENS, "device": "cpu"},
            "openai": {"kind": "openai", "endpoint": endpoint, "tokenizer": str(tiny_checkpoint), "max_new_tokens": MAX_TOKENS},
        }.items()
    }  # fmt: skip
    local, remote = (teachers[k].act(task, observation, [], []) for k in ("hf", "openai"))
    assert remote.raw_output == local.raw_output and remote.error == local.error and not remote.fatal
    assert remote.usage == local.usage and remote.usage.prompt_tokens > 50


def test_the_test_server_answers_top_logprobs_in_vllms_shape(served, tiny_states):
    """The stand-in's response shape, read with the openai client: choices[i].logprobs.content[j] carries token,
    logprob, bytes and top_logprobs (greedy: the chosen token is the most likely one)."""
    from openai import OpenAI

    client = OpenAI(base_url=served.base_url, api_key="EMPTY", max_retries=0)
    response = client.chat.completions.create(
        model=served.model_name,
        messages=[{"role": "user", "content": tiny_states[0]["instruction"]}],
        max_tokens=5,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
    )
    (choice,) = response.choices
    content = choice.logprobs.content
    assert len(content) == response.usage.completion_tokens and choice.finish_reason in ("stop", "length")
    for entry in content:
        assert len(entry.top_logprobs) == 3 and entry.bytes == list(entry.token.encode("utf-8"))
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob)
        assert [t.logprob for t in entry.top_logprobs] == sorted(
            (t.logprob for t in entry.top_logprobs), reverse=True
        )
