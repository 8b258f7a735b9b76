"""SkyFare (``flights``): from/to/date search with results that appear late, sort, nonstop filter, booking; flight
status."""

from rmsweb_kedro.web.sandbox.registry import Site
from rmsweb_kedro.web.sandbox.sites.flights.data import FlightData
from rmsweb_kedro.web.sandbox.sites.flights.pages import ROUTES
from rmsweb_kedro.web.sandbox.sites.flights.tasks import TEMPLATES

SITE = Site(
    name="flights",
    title="SkyFare",
    order=20,
    data=FlightData,
    routes=ROUTES,
    templates=TEMPLATES,
    collections={"flight_bookings": ("flight", "origin", "destination", "date", "passenger")},
)
