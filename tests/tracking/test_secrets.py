"""API keys: read by Kedro's config loader from conf/local/credentials.yml only, SecretStr everywhere after, so
every dump of a configuration shows them masked; a key written in parameters is refused. (The end-to-end check,
a run with a fake key whose every written file is searched, is in test_tracking.py.)"""

from __future__ import annotations

import json

import pytest
from kedro.config import OmegaConfigLoader
from pydantic import SecretStr, ValidationError

from rmsweb_kedro.agents.factory import TeacherSpec
from rmsweb_kedro.models.endpoint import ChatEndpoint, EndpointConfig, endpoint_credentials, resolve_api_key
from rmsweb_kedro.runs.provenance import MASK

KEY = "sk-FAKE-secrets-test-91b2"


def test_keys_come_from_kedro_credentials_and_never_render(tmp_path):
    (tmp_path / "base").mkdir()
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "credentials.yml").write_text(
        f"judge_endpoint:\n  api_key: {KEY}\nmlflow_s3:\n  AWS_ACCESS_KEY_ID: abc\n"
    )
    loader = OmegaConfigLoader(str(tmp_path), base_env="base", default_run_env="local")
    credentials = endpoint_credentials(loader["credentials"])
    assert set(credentials) == {"judge_endpoint"}  # entries without an api_key are not endpoint keys
    assert KEY not in repr(credentials) and KEY not in str(credentials)
    config = EndpointConfig(base_url="http://127.0.0.1:1/v1", model="judge", credentials="judge_endpoint")
    assert resolve_api_key(config, credentials).get_secret_value() == KEY
    endpoint = ChatEndpoint(config, credentials)
    assert endpoint._client.api_key == KEY  # what the HTTP client sends


def test_a_key_in_parameters_is_refused_and_one_from_code_dumps_masked():
    with pytest.raises(ValidationError, match="must not be written in parameters"):
        TeacherSpec.model_validate(
            {"kind": "openai", "endpoint": {"base_url": "u", "model": "m", "api_key": KEY}}
        )
    config = EndpointConfig(base_url="u", model="m", api_key=SecretStr(KEY))
    spec = TeacherSpec(kind="openai", endpoint=config)
    for dumped in (
        json.dumps(spec.model_dump(mode="json")),
        spec.model_dump_json(),
        str(spec.model_dump()),
        repr(spec),
    ):
        assert KEY not in dumped
    assert spec.model_dump(mode="json")["endpoint"]["api_key"] == MASK
    assert resolve_api_key(config).get_secret_value() == KEY
