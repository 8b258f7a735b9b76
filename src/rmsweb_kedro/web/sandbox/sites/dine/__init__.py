"""TableTime (``dine``): restaurants by city, date/time/party size, a confirmation modal."""

from rmsweb_kedro.web.sandbox.registry import Site
from rmsweb_kedro.web.sandbox.sites.dine.data import CUISINES, DineData
from rmsweb_kedro.web.sandbox.sites.dine.pages import ROUTES
from rmsweb_kedro.web.sandbox.sites.dine.tasks import TEMPLATES

SITE = Site(
    name="dine",
    title="TableTime",
    order=30,
    data=DineData,
    routes=ROUTES,
    templates=TEMPLATES,
    collections={"reservations": ("restaurant", "city", "date", "time", "party")},
    reserved_words=tuple(CUISINES),
)
