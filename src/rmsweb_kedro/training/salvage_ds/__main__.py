"""``accelerate launch ... -m rmsweb_kedro.training.salvage_ds --job JOB.json``: a launched Salvage-DS run
(``run.main``; the job's fields in ``run.py``'s docstring)."""

import logging

from rmsweb_kedro.training.salvage_ds.run import main

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main()
