"""The web: the Playwright browser environment and what a page may reach or show (:mod:`.browser`, its page scripts
in ``browser_js/``, :mod:`.page_scripts`) and the sandbox websites with their tasks and checkers (:mod:`.sandbox`)."""
