"""The shop's pages and route table."""

from __future__ import annotations

from rmsweb_kedro.web.sandbox.pages import (
    Request,
    Response,
    State,
    esc,
    field_input,
    field_select,
    form,
    hidden,
    item_list,
    money,
    not_found,
    notice,
    notice_page,
    page,
    redirect,
    sort_by,
)
from rmsweb_kedro.web.sandbox.registry import Route
from rmsweb_kedro.web.sandbox.sites.shop.data import SIZES, SORT_SHOP, ShopData

COLLECTIONS = {"cart": ("product", "size", "qty"), "orders": ("product", "size", "qty", "name", "address")}


def render(req: Request, title: str, main: str) -> Response:
    """A shop page: its header links to the cart."""
    return page(req, title, main, f'<a href="{req.url("/cart")}">Cart</a>')


def home(data: ShopData, req: Request, state: State) -> Response:
    search = field_input("Search products", "q") + "<button>Search</button>"
    return render(req, "Home", "<h1>Shopwell</h1>" + form(req.url("/search"), search))


def search(data: ShopData, req: Request, state: State) -> Response:
    query, sort = req.arg("q"), req.arg("sort", SORT_SHOP[0])
    sort_keys = {SORT_SHOP[1]: lambda p: p.price, SORT_SHOP[2]: lambda p: -p.price}
    products = sort_by(data.search_products(query), sort, sort_keys)
    controls = form(
        req.url("/search"), hidden(q=query) + field_select("Sort by", "sort", SORT_SHOP, sort, True)
    )
    listing = item_list([(req.url(f"/product/{p.id}"), p.name, "") for p in products])
    return render(
        req,
        "Search",
        f"<h1>Results for {esc(query)}</h1>{controls}" + (listing or "<p>No products match.</p>"),
    )


def product(data: ShopData, req: Request, state: State, product_id: str) -> Response:
    found = next((p for p in data.products if p.id == int(product_id)), None)
    if found is None:
        return not_found(req)
    inner = (
        hidden(pid=str(found.id))
        + field_select("Size", "size", SIZES)
        + field_select("Quantity", "qty", [str(n) for n in range(1, 6)])
        + "<button>Add to cart</button>"
    )
    facts = f"<p>Price: {money(found.price)}</p><p>Color: {found.color}</p>"
    return render(
        req, found.name, f"<h1>{esc(found.name)}</h1>{facts}" + form(req.url("/cart/add"), inner, "post")
    )


def add_to_cart(data: ShopData, req: Request, state: State) -> Response:
    found = next((p for p in data.products if str(p.id) == req.arg("pid")), None)
    if found is None:
        return not_found(req)
    state["cart"].append({"product": found.name, "size": req.arg("size"), "qty": req.arg("qty", "1")})
    return redirect(req.url("/cart"))


def cart(data: ShopData, req: Request, state: State) -> Response:
    lines = "".join(f"<p>{esc(i['product'])} · size {i['size']} · qty {i['qty']}</p>" for i in state["cart"])
    checkout_link = (
        f'<a href="{req.url("/checkout")}">Checkout</a>' if state["cart"] else "<p>Your cart is empty.</p>"
    )
    return render(req, "Cart", f"<h1>Your cart</h1>{lines}{checkout_link}")


def checkout(data: ShopData, req: Request, state: State) -> Response:
    inner = (
        field_input("Full name", "name") + field_input("Address", "address") + "<button>Place order</button>"
    )
    return render(req, "Checkout", "<h1>Checkout</h1>" + form(req.url("/order"), inner, "post"))


def place_order(data: ShopData, req: Request, state: State) -> Response:
    name, address = req.arg("name").strip(), req.arg("address").strip()
    if not (name and address and state["cart"]):
        return notice(req, "Checkout", "Checkout", "Please fill in every field.", render)
    state["orders"] += [{**item, "name": name, "address": address} for item in state["cart"]]
    state["cart"].clear()
    return redirect(req.url("/order/done"))


ROUTES = (
    Route("/", home),
    Route("/search", search),
    Route(r"/product/(\d+)", product),
    Route("/cart/add", add_to_cart, ("POST",)),
    Route("/cart", cart),
    Route("/checkout", checkout),
    Route("/order", place_order, ("POST",)),
    Route("/order/done", notice_page("Thank you", "Thank you", "Your order has been placed.", render)),
)
