"""How far to trust an LLM judge before a live run: its verdicts against the sandbox checker's (docs/evaluate.md)."""

from rmsweb_kedro.pipelines.judge_agreement.pipeline import create_pipeline

__all__ = ["create_pipeline"]
