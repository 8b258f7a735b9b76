"""Who acts: the agent, policy, reflector and judge protocols (:mod:`.base`), the policy in this process
(:mod:`.hf_policy`) or served (:mod:`.openai_policy`), the OpenAI-compatible teacher and reflector
(:mod:`.openai_roles`), the scripted sandbox teacher and reflector (:mod:`.scripted`), the reference-solution
agent (:mod:`.reference`) and building them from configuration (:mod:`.factory`). The judges are
:mod:`rmsweb_kedro.judges`."""
