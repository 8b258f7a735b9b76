"""NestFind (``homes``): listings by city and bedrooms, three to a page, facts, viewing requests."""

from rmsweb_kedro.web.sandbox.registry import Site
from rmsweb_kedro.web.sandbox.sites.homes.data import HomesData
from rmsweb_kedro.web.sandbox.sites.homes.pages import ROUTES
from rmsweb_kedro.web.sandbox.sites.homes.tasks import TEMPLATES

SITE = Site(
    name="homes",
    title="NestFind",
    order=40,
    data=HomesData,
    routes=ROUTES,
    templates=TEMPLATES,
    collections={"viewings": ("address", "city", "name", "date")},
)
