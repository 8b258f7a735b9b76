"""The shop's task templates: a product's price, adding to the cart, a whole order."""

from __future__ import annotations

import random

from rmsweb_kedro.web.sandbox.pages import money
from rmsweb_kedro.web.sandbox.reference import ReferenceStep
from rmsweb_kedro.web.sandbox.sites.shop.data import SIZES, Product, ShopData
from rmsweb_kedro.web.sandbox.steps import (
    MONEY,
    Draft,
    Pools,
    accept_cookies,
    answer_task,
    choose,
    click,
    dead_end_search,
    done,
    named_templates,
    person,
    pick,
    record,
    submit,
    type_in,
)


def shop_product(shop: ShopData, rng: random.Random, pools: Pools) -> tuple[Product, list[ReferenceStep]]:
    adjective, kind = (
        rng.choice(pools["adjectives"]),
        rng.choice(sorted({p.name.split()[1] for p in shop.products})),
    )
    product = shop.product_by_name(f"{adjective} {kind}")
    distractors = [p.name for p in shop.search_products(product.name)]
    steps = [
        accept_cookies(),
        dead_end_search("Search products", product.name, f"Search for the {product.name}."),
        pick("link", product.name, distractors, f"Open the {product.name}."),
    ]  # fmt: skip
    return product, steps


def shop_price(shop: ShopData, rng: random.Random, pools: Pools) -> Draft:
    product, steps = shop_product(shop, rng, pools)
    return answer_task(
        f"What is the price of the {product.name} on Shopwell?",
        {"product": product.name},
        steps,
        money(product.price),
        read="Price: " + MONEY,
    )


def shop_cart(shop: ShopData, rng: random.Random, pools: Pools) -> Draft:
    product, steps = shop_product(shop, rng, pools)
    size, qty = rng.choice(SIZES), str(rng.randrange(1, 4))
    steps += [
        choose("Size", size, SIZES, f"Pick size {size}."),
        choose("Quantity", qty, ["1", "2", "3"], f"Set the quantity to {qty}."),
        click("button", "Add to cart", "Add it to the cart."),
        done(),
    ]
    return Draft(
        f"Add {qty} {product.name} in size {size} to the cart.",
        {"product": product.name, "size": size, "qty": qty},
        steps,
        record("cart", product=product.name, size=size, qty=qty),
    )


def shop_order(shop: ShopData, rng: random.Random, pools: Pools) -> Draft:
    product, steps = shop_product(shop, rng, pools)
    size = rng.choice(SIZES)
    name, _ = person(rng, pools)
    street, city = rng.choice(pools["streets"]), rng.choice(pools["cities"])
    address = f"{street} Street {rng.randrange(1, 40)}, {city}"
    steps += [
        choose("Size", size, SIZES, f"Pick size {size}."),
        choose("Quantity", "1", ["2"], "One is enough."),
        click("button", "Add to cart", "Add it to the cart."),
        click("link", "Checkout", "Go to checkout."),
        type_in("Full name", name, "Enter the buyer's name."),
        type_in("Address", address, "Enter the shipping address."),
        submit("Place order", "Place the order."),
        done(),
    ]
    return Draft(
        f"Buy one {product.name} in size {size} for {name}, shipped to {address}.",
        {
            "product": product.name,
            "size": size,
            "name": name,
            "street": street,
            "city": city,
            "address": address,
        },
        steps,
        record("orders", product=product.name, size=size, qty="1", name=name, address=address),
    )


TEMPLATES = named_templates(shop_price, shop_cart, shop_order)
