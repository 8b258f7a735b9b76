"""Shopwell (``shop``): search, sort, product page (size, quantity), cart, checkout."""

from rmsweb_kedro.web.sandbox.registry import Site
from rmsweb_kedro.web.sandbox.sites.shop.data import PRODUCT_KINDS, ShopData

SITE = Site.from_package(__name__, "Shopwell", order=10, data=ShopData, reserved_words=tuple(PRODUCT_KINDS))
