"""Kedro's credentials to the nodes: :class:`CredentialsHooks` fills the ``endpoint_credentials`` dataset."""

from __future__ import annotations

from typing import Any

from kedro.framework.hooks import hook_impl

#: The catalog name the nodes that build endpoints (collect, live) read their API keys from.
CREDENTIALS_DATASET = "endpoint_credentials"


class CredentialsHooks:
    """Hands the nodes Kedro's credentials (conf/local/credentials.yml, through the config loader) as the
    ``endpoint_credentials`` dataset: ``{entry name: API key as SecretStr}`` (``models.endpoint``), filled when the
    catalog declares it (conf/base/catalog_tracking.yml), added as a ``MemoryDataset`` otherwise. Parameters only
    name an entry (``credentials: <name>``), so no key is written in them."""

    @hook_impl
    def after_catalog_created(self, catalog: Any, conf_creds: dict[str, Any]) -> None:
        from kedro.io import MemoryDataset

        from rmsweb_kedro.models.endpoint import endpoint_credentials

        credentials = endpoint_credentials(conf_creds or {})
        if CREDENTIALS_DATASET in catalog:  # declared (catalog_tracking.yml): fill it
            catalog.save(CREDENTIALS_DATASET, credentials)
        else:
            catalog[CREDENTIALS_DATASET] = MemoryDataset(credentials, copy_mode="assign")
