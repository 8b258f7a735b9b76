"""The sandbox's sites, one package each (``SITE = Site(...)`` in its ``__init__``); found by
:func:`rmsweb_kedro.web.sandbox.registry.all_sites`. docs/sandbox.md, "Adding a site", says what a package holds."""
