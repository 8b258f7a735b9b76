"""SkyFare (``flights``): from/to/date search with results that appear late, sort, nonstop filter, booking; flight
status."""

from rmsweb_kedro.web.sandbox.registry import Site
from rmsweb_kedro.web.sandbox.sites.flights.data import FlightData

SITE = Site.from_package(__name__, "SkyFare", order=20, data=FlightData)
