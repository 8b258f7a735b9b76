"""What a "site" is, in one place: the registrable domain of a host under the Public Suffix List, private suffixes
included (``publicsuffixlist``: its data ships in the package, so nothing is fetched). ``www.allrecipes.com`` and
``allrecipes.com`` are one site, ``en.wikipedia.org`` and ``de.wikipedia.org`` one site (``wikipedia.org``), while two
users' pages on one hosting suffix (``a.github.io``, ``b.github.io``) are two. The browser keeps open-web navigation
on it, the task sources split and decontaminate by it, and the loaders and the proposer name a task's site with it.
"""

from __future__ import annotations

import ipaddress
from functools import cache
from typing import Any
from urllib.parse import urlsplit


@cache
def _suffixes() -> Any:
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList()  # the list shipped in the package: no network


def registrable_domain(host: str) -> str:
    """The site a host belongs to: its registrable domain under the Public Suffix List, private suffixes included
    (``a.b.github.io`` -> ``b.github.io``, ``www.bbc.co.uk`` -> ``bbc.co.uk``); an IP address, ``localhost`` or a
    bare suffix is its own site."""
    host = host.lower().strip(".")
    try:
        ipaddress.ip_address(host.strip("[]"))
        return host
    except ValueError:
        return _suffixes().privatesuffix(host) or host


def site_of(url: str) -> str:
    """The site of a URL (``https://www.gamestop.com/x`` -> ``gamestop.com``); a bare host (``amazon.com``, a
    held-out site written without a scheme) is read as a host. Empty when there is no host."""
    host = urlsplit(url if "://" in url else f"//{url}").hostname
    return registrable_domain(host) if host else ""
