"""``python -m rmsweb_kedro.viewer [--project DIR] [--env ENV] [--host H] [--port P]``."""

from rmsweb_kedro.viewer.server import main

main()
