"""WorkBoard (``jobs``): keyword/location search, a job-type filter, the application form."""

from rmsweb_kedro.web.sandbox.registry import Site
from rmsweb_kedro.web.sandbox.sites.jobs.data import JobsData

SITE = Site.from_package(__name__, "WorkBoard", order=50, data=JobsData)
