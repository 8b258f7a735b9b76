"""TableTime (``dine``): restaurants by city, date/time/party size, a confirmation modal."""

from rmsweb_kedro.web.sandbox.registry import Site
from rmsweb_kedro.web.sandbox.sites.dine.data import CUISINES, DineData

SITE = Site.from_package(__name__, "TableTime", order=30, data=DineData, reserved_words=tuple(CUISINES))
