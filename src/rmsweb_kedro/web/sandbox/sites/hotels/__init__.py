"""StayInn (``hotels``): city, check-in, nights and guests, sort, booking. Held out by default (test only:
``sandbox.held_out_sites``)."""

from rmsweb_kedro.web.sandbox.registry import Site
from rmsweb_kedro.web.sandbox.sites.hotels.data import HotelsData

SITE = Site.from_package(__name__, "StayInn", order=70, data=HotelsData)
