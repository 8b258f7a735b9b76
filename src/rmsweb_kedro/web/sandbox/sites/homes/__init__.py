"""NestFind (``homes``): listings by city and bedrooms, three to a page, facts, viewing requests."""

from rmsweb_kedro.web.sandbox.registry import Site
from rmsweb_kedro.web.sandbox.sites.homes.data import HomesData

SITE = Site.from_package(__name__, "NestFind", order=40, data=HomesData)
