"""The rollout extension over HTTP (``/v2/models/{m}/rollout``): the real app over a real
engine, the routes in the ``model-repository`` restricted group."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench import Server, ServerOptions
from workbench.frontends.http.guards import api_group
from workbench.testing.fake_backend import FAKE_CONFIG, write_backend_model

pytestmark = pytest.mark.usefixtures("fake_backend")

KEY = "r0ll-key"
INFER = {"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "FP32", "data": [1.0]}]}


def two_versions(repo: Path) -> Path:
    config = FAKE_CONFIG.format(name="ab", count=1, group="") + "version_policy: { all { } }\n"
    folder = write_backend_model(repo, "ab", config)
    (folder / "2").mkdir()
    return folder


@pytest.mark.parametrize("path", ["/v2/models/ab/rollout", "/v2/models/ab/rollout/promote",
                                  "/v2/models/ab/rollout/rollback"])
def test_rollout_routes_are_in_the_model_repository_group(path: str) -> None:
    assert api_group(path) == "model-repository"


async def test_set_read_promote_rollback_and_clear_over_http(tmp_path: Path, asgi_client) -> None:
    folder = two_versions(tmp_path)
    options = ServerOptions(model_repository=[str(tmp_path)], model_control_mode="explicit",
                            load_model=["ab"], http_restricted_api=[f"model-repository:admin={KEY}"])
    admin = {"admin": KEY}
    async with Server(options) as server, asgi_client(server) as http:
        refused = await http.post("/v2/models/ab/rollout", json={"weights": {"1": 1}})
        assert refused.status_code == 403 and "expecting header 'admin'" in refused.json()["error"]
        assert (await http.get("/v2/models/ab/rollout")).status_code == 403
        assert (await http.post("/v2/models/ab/rollout/promote", json={})).status_code == 403

        body = {"weights": {"1": 1}, "candidate": 2, "mirror_percent": 100}
        reply = await http.post("/v2/models/ab/rollout", json=body, headers=admin)
        assert reply.status_code == 200, reply.text
        assert reply.json()["rollout"]["weights"] == {"1": 1.0}
        for _ in range(3):
            answer = await http.post("/v2/models/ab/infer", json=INFER)
            assert answer.json()["model_version"] == "1"
        await server.rollouts.settle("ab")
        report = (await http.get("/v2/models/ab/rollout", headers=admin)).json()
        assert report["routed"] == {"1": 3} and report["mirror"]["mirrored"] == 3
        assert report["mirror"]["agreement"]["OUTPUT0"]["agreement"] == 1.0

        bad = await http.post("/v2/models/ab/rollout", json={"weights": {"5": 1}}, headers=admin)
        assert bad.status_code == 400 and "unknown version 5" in bad.json()["error"]
        typo = await http.post("/v2/models/ab/rollout", json={"weight": {"1": 1}}, headers=admin)
        assert typo.status_code == 400 and "unknown rollout field 'weight'" in typo.json()["error"]
        assert (await http.get("/v2/models/nope/rollout", headers=admin)).status_code == 404

        typo = await http.post("/v2/models/ab/rollout/promote", json={"versoin": 2}, headers=admin)
        assert typo.status_code == 400 and "unknown rollout field 'versoin'" in typo.json()["error"]
        assert not (folder / "config.pbtxt.bak").exists()  # nothing was promoted
        promoted = await http.post("/v2/models/ab/rollout/promote", json={}, headers=admin)
        assert promoted.status_code == 200 and promoted.json()["promoted"] == 2, promoted.text
        assert (folder / "config.pbtxt.bak").exists()
        assert (await http.post("/v2/models/ab/infer", json=INFER)).json()["model_version"] == "2"

        rolled = await http.post("/v2/models/ab/rollout/rollback", headers=admin)
        assert rolled.status_code == 200 and rolled.json()["restored"]["weights"] == {"1": 1.0}
        again = await http.post("/v2/models/ab/rollout/rollback", headers=admin)
        assert again.status_code == 404 and "no promote" in again.json()["error"]

        assert (await http.delete("/v2/models/ab/rollout", headers=admin)).status_code == 200
        assert (await http.get("/v2/models/ab/rollout", headers=admin)).json()["rollout"] is None
        assert (await http.post("/v2/models/ab/infer", json=INFER)).json()["model_version"] == "2"


async def test_sticky_by_a_forwarded_header(tmp_path: Path, asgi_client) -> None:
    two_versions(tmp_path)
    options = ServerOptions(model_repository=[str(tmp_path)], http_header_forward_pattern="^x-user$")
    async with Server(options) as server, asgi_client(server) as http:
        await server.rollouts.set("ab", {1: 1, 2: 1}, sticky="x-user")
        seen: dict[str, set[str]] = {}
        for user in range(16):
            for _ in range(3):
                reply = await http.post("/v2/models/ab/infer", json=INFER, headers={"x-user": f"u{user}"})
                seen.setdefault(f"u{user}", set()).add(reply.json()["model_version"])
        assert all(len(versions) == 1 for versions in seen.values()), seen
        assert set().union(*seen.values()) == {"1", "2"}
