"""The web side: sandbox websites and tasks (``web.sandbox``) and the Playwright environment (``web.browser``)."""
