"""The shapes every wing shares, importing nothing of the project: the action space (:mod:`.actions`), the records and
tables that pass between stages (:mod:`.schema`), the policy's prompt (:mod:`.prompts`), what a site is
(:mod:`.sites`), seeded draws (:mod:`.seeding`) and a file pinned at its public home (:mod:`.remote`)."""
