"""WorkBoard (``jobs``): keyword/location search, a job-type filter, the application form."""

from rmsweb_kedro.web.sandbox.registry import Site
from rmsweb_kedro.web.sandbox.sites.jobs.data import JobsData
from rmsweb_kedro.web.sandbox.sites.jobs.pages import ROUTES
from rmsweb_kedro.web.sandbox.sites.jobs.tasks import TEMPLATES

SITE = Site(
    name="jobs",
    title="WorkBoard",
    order=50,
    data=JobsData,
    routes=ROUTES,
    templates=TEMPLATES,
    collections={"applications": ("job", "city", "name", "email", "experience")},
)
