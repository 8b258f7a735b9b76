"""Who says whether an episode succeeded: which judge judges what (:mod:`.choice`, the one place the choice is made),
the sandbox's programmatic checker (:mod:`.sandbox`), the benchmarks' LLM judges (:mod:`.llm`: WebVoyager, WebJudge),
the rubric judges (:mod:`.rubric`), the reference-answer judges (:mod:`.answer`) and their prompt texts
(:mod:`.prompts`). Imports agents (the Judge protocol), models, web and contracts."""
