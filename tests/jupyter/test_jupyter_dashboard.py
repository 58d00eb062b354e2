"""The dashboard mounted in Jupyter's tornado application at ``{base_url}workbench/``, under a
non-root base URL: the Panel page, its assets and its websocket behind Jupyter's
authentication, and a session's end closing its dashboard."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.websocket import websocket_connect

from workbench.jupyter.dashboard import DashboardMount


@pytest.fixture
def jp_base_url() -> str:
    """As under JupyterHub: the dashboard must follow the base URL."""
    return "/jhub/user/x/"


@pytest.fixture
def workbench_config() -> dict:
    """Sessions without a browser connected end quickly."""
    return {"dashboard_session_linger_s": 0.3}


@pytest.fixture
def auth(jp_auth_header: dict) -> dict:
    return dict(jp_auth_header)


async def fetch(url: str, headers: dict | None = None, **kwargs):
    """GET ``url`` without following redirects; the response for any status."""
    try:
        return await AsyncHTTPClient().fetch(HTTPRequest(url, headers=headers or {}, follow_redirects=False,
                                                         **kwargs))
    except HTTPClientError as exc:
        assert exc.response is not None, exc
        return exc.response


async def test_the_page_is_panels_and_needs_jupyters_login(workbench, jupyter_url: str, auth: dict) -> None:
    page = await fetch(f"{jupyter_url}workbench/", auth)
    assert page.code == 200
    html = page.body.decode()
    assert "<title>Model Serving Workbench</title>" in html
    assert 'src="static/js/bokeh.min.js' in html and "static/extensions/panel/panel.min.js" in html

    stranger = await fetch(f"{jupyter_url}workbench/")
    assert stranger.code == 302
    assert stranger.headers["Location"].startswith("/jhub/user/x/login?next=")
    assert (await fetch(f"{jupyter_url}workbench", auth)).headers["Location"] == "/jhub/user/x/workbench/"


async def test_the_pages_icon_is_panels(workbench, jupyter_url: str, auth: dict) -> None:
    page = (await fetch(f"{jupyter_url}workbench/", auth)).body.decode()
    assert '<link rel="icon" href="./favicon.ico">' in page
    icon = await fetch(f"{jupyter_url}workbench/favicon.ico", auth)
    assert icon.code == 301 and icon.headers["Location"] == "static/extensions/panel/images/favicon.ico"
    served = await fetch(f"{jupyter_url}workbench/static/extensions/panel/images/favicon.ico", auth)
    assert served.code == 200 and served.body[:4] == b"\x00\x00\x01\x00"  # an ICO file


@pytest.mark.parametrize("asset", ["static/js/bokeh.min.js", "static/extensions/panel/panel.min.js"])
async def test_assets_are_served_to_the_logged_in_only(workbench, jupyter_url: str, auth: dict, asset: str) -> None:
    served = await fetch(f"{jupyter_url}workbench/{asset}", auth)
    assert served.code == 200
    assert "javascript" in served.headers["Content-Type"] and len(served.body) > 100_000
    assert (await fetch(f"{jupyter_url}workbench/{asset}")).code == 302


def login_cookie(page) -> str:
    """The login cookie Jupyter set on a token-authenticated answer."""
    cookies = [c.split(";")[0] for c in page.headers.get_list("Set-Cookie") if c.startswith("username-")]
    assert cookies, page.headers
    return "; ".join(cookies)


async def test_the_pages_websocket_opens_with_the_login_cookie(workbench, jupyter_url: str, auth: dict) -> None:
    page = await fetch(f"{jupyter_url}workbench/", auth)
    found = re.search(r'"token":\s*"([^"]+)"', page.body.decode())
    assert found is not None, page.body[:500]
    session_token = found.group(1)
    origin = jupyter_url.split("/jhub")[0]
    socket = await websocket_connect(
        HTTPRequest(f"{origin.replace('http', 'ws', 1)}/jhub/user/x/workbench/ws",
                    headers={"Cookie": login_cookie(page), "Origin": origin}),
        subprotocols=["bokeh", session_token])
    ack = await socket.read_message()
    assert ack is not None, "the socket closed"
    header = json.loads(ack)  # Bokeh's ACK
    socket.close()
    assert header["msgtype"] == "ACK"


@pytest.mark.parametrize("who", ["nobody", "another site"])
async def test_the_websocket_refuses_strangers(workbench, jupyter_url: str, auth: dict, who: str) -> None:
    """Nobody: no credentials. Another site: a page elsewhere using the browser's login
    cookie (Jupyter skips the origin check for token-authenticated scripts, not for cookies)."""
    url = f"{jupyter_url.replace('http', 'ws', 1)}workbench/ws"
    headers = {}
    if who == "another site":
        page = await fetch(f"{jupyter_url}workbench/", auth)
        headers = {"Cookie": login_cookie(page), "Origin": "http://elsewhere.example"}
    with pytest.raises(HTTPClientError) as refused:
        await websocket_connect(HTTPRequest(url, headers=headers))
    assert refused.value.code == 403


async def test_a_session_without_its_browser_ends_and_closes_its_dashboard(
        workbench, jp_serverapp, jupyter_url: str, auth: dict, api) -> None:
    mount: DashboardMount = jp_serverapp.web_app.settings["workbench_dashboard"]
    assert (await fetch(f"{jupyter_url}workbench/", auth)).code == 200  # a session, no websocket
    assert mount.open_sessions == 1
    assert (await api("status"))[1]["dashboard_sessions"] == 1
    dashboard = next(iter(mount.dashboards))
    for _ in range(600):
        if not mount.open_sessions:
            break
        await asyncio.sleep(0.05)
    assert mount.open_sessions == 0
    # its live statistics are detached: their stream ends at once instead of sampling
    samples = await asyncio.wait_for(_drain(dashboard.live.live.stream(0.01)), timeout=30)
    assert samples == []


async def _drain(stream) -> list:
    return [item async for item in stream]
