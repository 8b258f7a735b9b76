"""StayInn (``hotels``): city, check-in, nights and guests, sort, booking. Held out by default (test only:
``sandbox.held_out_sites``)."""

from rmsweb_kedro.web.sandbox.registry import Site
from rmsweb_kedro.web.sandbox.sites.hotels.data import HotelsData
from rmsweb_kedro.web.sandbox.sites.hotels.pages import ROUTES
from rmsweb_kedro.web.sandbox.sites.hotels.tasks import TEMPLATES

SITE = Site(
    name="hotels",
    title="StayInn",
    order=70,
    data=HotelsData,
    routes=ROUTES,
    templates=TEMPLATES,
    collections={"hotel_bookings": ("hotel", "city", "checkin", "nights", "guests", "name", "email")},
)
