"""Shopwell (``shop``): search, sort, product page (size, quantity), cart, checkout."""

from rmsweb_kedro.web.sandbox.registry import Site
from rmsweb_kedro.web.sandbox.sites.shop.data import PRODUCT_KINDS, ShopData
from rmsweb_kedro.web.sandbox.sites.shop.pages import ROUTES
from rmsweb_kedro.web.sandbox.sites.shop.tasks import TEMPLATES

SITE = Site(
    name="shop",
    title="Shopwell",
    order=10,
    data=ShopData,
    routes=ROUTES,
    templates=TEMPLATES,
    collections={"cart": ("product", "size", "qty"), "orders": ("product", "size", "qty", "name", "address")},
    reserved_words=tuple(PRODUCT_KINDS),
)
