"""The private internals of uvicorn, Bokeh, Panel, tornado, jupyter_server and grpc that
workbench relies on still exist with the shape it uses.

pyproject.toml bounds each of these libraries below its next untested release; when a bound is
raised, this module says which of our modules an upgrade broke (each assertion names it),
before a behaviour test fails somewhere far from the cause. One test per library and use; a
comment at each use points here.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types

import pytest


def assigned_attributes(cls: type) -> set[str]:
    """Names a class (or a base along its MRO) assigns as ``self.<name>`` in its methods'
    source (instance attributes set in ``__init__`` or later, e.g. a parser callback)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):  # a builtin or C class: no source
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                    and isinstance(node.value, ast.Name) and node.value.id == "self"):
                names.add(node.attr)
    return names


def parameters(function: object) -> list[str]:
    """The parameter names of ``function`` (``self`` included for a plain function)."""
    return list(inspect.signature(function).parameters)  # type: ignore[arg-type]


def require(owner: object, names: list[str] | tuple[str, ...], used_by: str) -> None:
    """Each of ``names`` is an attribute of ``owner``; the failure names our module."""
    missing = [name for name in names if not hasattr(owner, name)]
    assert not missing, f"{owner!r} no longer has {missing}: used by {used_by}"


# --- uvicorn ------------------------------------------------------------------------------

PROTOCOL = "workbench/frontends/http/protocol.py"
GUARD = "workbench/frontends/http/connection_guard.py"
HTTP_SERVICE = "workbench/serving/http_service.py"


def test_uvicorn_httptools_protocol_callbacks() -> None:
    """CoalescingHttpToolsProtocol / GuardedHttpToolsProtocol override these (undocumented
    module ``uvicorn.protocols.http.httptools_impl``) and call the base's."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    expected = {
        "connection_made": ["self", "transport"], "connection_lost": ["self", "exc"],
        "data_received": ["self", "data"], "on_message_begin": ["self"],
        "on_header": ["self", "name", "value"], "on_headers_complete": ["self"],
        "on_body": ["self", "body"], "on_message_complete": ["self"],
        "on_response_complete": ["self"], "shutdown": ["self"],
    }
    for name, params in expected.items():
        method = getattr(HttpToolsProtocol, name, None)
        assert callable(method), f"HttpToolsProtocol.{name} is gone: overridden in {PROTOCOL} and {GUARD}"
        assert parameters(method) == params, (
            f"HttpToolsProtocol.{name}{inspect.signature(method)} (expected {params}): "
            f"overridden in {PROTOCOL} and {GUARD}")


def test_uvicorn_httptools_protocol_state() -> None:
    """The protocol's and its request cycle's attributes the two protocols read and set."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

    protocol = assigned_attributes(HttpToolsProtocol)
    for name in ("parser", "headers", "scope", "cycle", "loop", "url"):
        assert name in protocol, f"HttpToolsProtocol.{name} is no longer set: used by {PROTOCOL}"
    for name in ("connections", "pipeline", "flow", "transport"):
        assert name in protocol, f"HttpToolsProtocol.{name} is no longer set: used by {GUARD}"
    cycle = assigned_attributes(RequestResponseCycle)
    for name in ("keep_alive", "response_complete", "more_body", "disconnected", "message_event"):
        assert name in cycle, f"RequestResponseCycle.{name} is no longer set: used by {GUARD}"


def test_uvicorn_flow_control_and_parser() -> None:
    """``flow.read_paused`` (a body the server is not reading is not the client's fault) and
    the httptools parser's lenient chunked + Content-Length mode."""
    import httptools
    from uvicorn.protocols.http.flow_control import FlowControl

    assert "read_paused" in assigned_attributes(FlowControl), f"FlowControl.read_paused: used by {GUARD}"
    setter = getattr(httptools.HttpRequestParser, "set_dangerous_leniencies", None)
    assert callable(setter), f"httptools' set_dangerous_leniencies is gone: used by {PROTOCOL}"


def test_uvicorn_server_hooks() -> None:
    """HTTPService / MetricsService override ``startup``, ``shutdown``, ``handle_exit`` and the
    undocumented ``capture_signals`` context manager, and read the server's state."""
    import uvicorn

    require(uvicorn.Server, ("startup", "shutdown", "handle_exit", "capture_signals"), HTTP_SERVICE)
    assert parameters(uvicorn.Server.startup) == ["self", "sockets"], HTTP_SERVICE
    assert parameters(uvicorn.Server.shutdown) == ["self", "sockets"], HTTP_SERVICE
    assert parameters(uvicorn.Server.handle_exit) == ["self", "sig", "frame"], HTTP_SERVICE
    assert parameters(uvicorn.Server.capture_signals) == ["self"], (
        f"uvicorn.Server.capture_signals: overridden in {HTTP_SERVICE} and workbench/serving/metrics_service.py")
    server = assigned_attributes(uvicorn.Server)
    for name in ("server_state", "started", "should_exit", "config"):
        assert name in server, f"uvicorn.Server.{name} is no longer set: used by {HTTP_SERVICE}"
    from uvicorn.server import ServerState

    assert "connections" in assigned_attributes(ServerState), f"ServerState.connections: used by {HTTP_SERVICE}"


# --- Bokeh --------------------------------------------------------------------------------

MOUNT = "workbench/jupyter/dashboard.py"
KERNEL_COMM = "workbench/ui/kernel_comm.py"
PANEL_WRITES = "workbench/ui/panel_writes.py"


def test_bokeh_session_teardown() -> None:
    """DashboardMount.stop discards each session with Bokeh's own (private) path after
    closing its connections."""
    pytest.importorskip("bokeh")
    from bokeh.server.connection import ServerConnection
    from bokeh.server.contexts import ApplicationContext
    from bokeh.server.session import ServerSession
    from bokeh.server.tornado import BokehTornado

    discard = getattr(ApplicationContext, "_discard_session", None)
    assert discard is not None and inspect.iscoroutinefunction(discard), (
        f"ApplicationContext._discard_session (a coroutine) is gone: used by {MOUNT}")
    assert parameters(discard) == ["self", "session", "should_discard"], MOUNT
    assert "_subscribed_connections" in assigned_attributes(ServerSession), (
        f"ServerSession._subscribed_connections: used by {MOUNT}")
    assert "_socket" in assigned_attributes(ServerConnection), (
        f"ServerConnection._socket: used by {MOUNT} and {PANEL_WRITES}")
    assert parameters(BokehTornado.client_lost) == ["self", "connection"], MOUNT


def test_bokeh_model_callbacks() -> None:
    """without_echoes reads a model's on_change callbacks (``Model._callbacks``, by attribute)."""
    pytest.importorskip("bokeh")
    from bokeh.models import ColumnDataSource

    source = ColumnDataSource()
    source.on_change("data", lambda attr, old, new: None)
    callbacks = getattr(source, "_callbacks", None)
    assert isinstance(callbacks, dict) and callbacks.get("data"), (
        f"Model._callbacks (attr -> on_change callbacks) changed: used by {KERNEL_COMM}")


# --- Panel --------------------------------------------------------------------------------

LOCAL_CSS = "workbench/ui/local_css.py"


def test_panel_write_queue() -> None:
    """panel_writes replaces Panel 1.9's writer of queued websocket messages; on another
    queue it leaves Panel alone (install() returns False), silently bringing back the lost
    updates it fixes: this test says so first."""
    pytest.importorskip("panel")
    from panel.io import document

    require(document, ("_WRITE_MSGS", "_WRITE_BLOCK", "_WRITE_FUTURES", "_dispatch_msgs",
                       "_run_write_futures", "dispatch_tornado", "dispatch_django",
                       "extra_socket_handlers"), PANEL_WRITES)
    assert not hasattr(document, "_WRITE_EVENTS"), f"Panel's write queue was rewritten: see {PANEL_WRITES}"
    assert parameters(document._run_write_futures) == ["doc"], PANEL_WRITES
    assert parameters(document.dispatch_tornado)[:3] == ["conn", "events", "msg"], PANEL_WRITES


def test_panel_viewable_handlers() -> None:
    """apply_on_loop replaces one viewable's notebook-comm handlers and reads its models."""
    pn = pytest.importorskip("panel")

    pane = pn.pane.Markdown("x")
    assert isinstance(getattr(pane, "_models", None), dict), f"Viewable._models: used by {KERNEL_COMM}"
    assert parameters(pane._on_msg) == ["ref", "manager", "msg"], f"Viewable._on_msg: replaced in {KERNEL_COMM}"
    assert parameters(pane._render_model) == ["doc", "comm"], f"Viewable._render_model: replaced in {KERNEL_COMM}"


def panels_patch_stylesheet(resources: types.ModuleType) -> object:
    """``panel.io.resources.patch_stylesheet`` as Panel defines it, unwrapped from ours."""
    function = resources.patch_stylesheet
    if getattr(function, "__module__", "") == "workbench.ui.local_css":
        function = inspect.signature(function).parameters["_panel"].default
    return function


def test_panel_stylesheet_patching_sees_panels_function_after_ours_is_installed() -> None:
    """The check below ran after a dashboard test had installed our wrapper and read the
    wrapper's signature (failed in a full run, passed alone)."""
    pytest.importorskip("panel")
    import panel.io.resources as resources

    from workbench.ui.local_css import keep_stylesheets_local

    keep_stylesheets_local()
    assert parameters(panels_patch_stylesheet(resources)) == ["stylesheet", "dist_url"]
    test_panel_stylesheet_patching()


def test_panel_stylesheet_patching() -> None:
    """keep_stylesheets_local wraps ``patch_stylesheet`` in both modules that hold it."""
    pytest.importorskip("panel")
    import panel.io.resources as resources
    import panel.reactive as reactive

    require(resources, ("patch_stylesheet", "CDN_DIST", "DIST_DIR", "get_dist_path"), LOCAL_CSS)
    # Panel's own function: once keep_stylesheets_local ran in this process (any earlier
    # dashboard test), the name holds our wrapper, which keeps Panel's as its _panel default
    assert parameters(panels_patch_stylesheet(resources)) == ["stylesheet", "dist_url"], LOCAL_CSS
    assert resources.DIST_DIR.is_dir(), LOCAL_CSS
    assert hasattr(reactive, "patch_stylesheet"), (
        f"panel.reactive no longer imports patch_stylesheet by name: patched in {LOCAL_CSS}")
    assert "cdn" in parameters(resources.get_dist_path), MOUNT


# --- tornado ------------------------------------------------------------------------------


def test_tornado_lock_state() -> None:
    """panel_writes (as Panel does) tells a held websocket write lock by its semaphore's count."""
    tornado_locks = pytest.importorskip("tornado.locks")

    lock = tornado_locks.Lock()
    block = getattr(lock, "_block", None)
    assert getattr(block, "_value", None) == 1, f"tornado Lock._block._value: used by {PANEL_WRITES}"


# --- jupyter_server -----------------------------------------------------------------------


def test_jupyter_handler_prepare() -> None:
    """The dashboard's handlers call JupyterHandler.prepare with its private
    ``_redirect_to_login`` keyword (403 instead of a login redirect for the websocket)."""
    pytest.importorskip("jupyter_server")
    from jupyter_server.base.handlers import JupyterHandler

    assert "_redirect_to_login" in parameters(JupyterHandler.prepare), (
        "JupyterHandler.prepare(_redirect_to_login=...): used by workbench/jupyter/handlers/dashboard.py")


# --- grpc ---------------------------------------------------------------------------------


def test_jupyter_serverapp_stopping_flag() -> None:
    """``workbench.jupyter.process_exit`` ends the process only when ``ServerApp.stop()`` set
    the ``_stopping`` trait (pytest-jupyter's cleanup never calls ``stop()``)."""
    pytest.importorskip("jupyter_server")
    from jupyter_server.serverapp import ServerApp

    assert ServerApp.class_traits()["_stopping"].default_value is False
    assert "self._stopping = True" in inspect.getsource(ServerApp.stop)


def test_jupyter_serverapp_runs_its_loop_in_start_ioloop() -> None:
    """``server_stopping`` also takes a clean-up on the loop ``ServerApp.start_ioloop`` runs
    (``POST /api/shutdown``: ``ShutdownHandler`` awaits ``_cleanup`` and stops the loop)."""
    pytest.importorskip("jupyter_server")
    from jupyter_server.serverapp import ServerApp
    from jupyter_server.services.shutdown import ShutdownHandler

    assert "self.io_loop.start()" in inspect.getsource(ServerApp.start_ioloop)
    assert "self.start_ioloop()" in inspect.getsource(ServerApp.start)
    handler = inspect.getsource(ShutdownHandler.post)
    assert "_cleanup()" in handler and "stop()" in handler and "_stopping" not in handler


def test_grpc_method_handler_shape() -> None:
    """add_lenient collects the generated code's method handlers and rebuilds each with
    ``_replace`` (grpc's handlers are namedtuples: ``grpc._utilities.RpcMethodHandler``)."""
    import grpc

    handler = grpc.unary_unary_rpc_method_handler(lambda request, context: None)
    assert callable(getattr(handler, "_replace", None)), (
        "grpc's RpcMethodHandler is no longer a namedtuple: used by workbench/frontends/grpc/decoding.py")
    replaced = handler._replace(request_deserializer=bytes)
    assert replaced.request_deserializer is bytes and replaced.unary_unary is handler.unary_unary
    require(grpc.aio.Server, ("add_generic_rpc_handlers", "add_registered_method_handlers"),
            "workbench/frontends/grpc/decoding.py")


def test_ray_serve_controller_constants() -> None:
    """workbench/ray/cli.py (serve_running) finds Serve's controller actor by the name and
    namespace of ``ray.serve._private.constants``."""
    pytest.importorskip("ray.serve", reason="the ray extra")
    from ray.serve._private import constants

    assert isinstance(constants.SERVE_CONTROLLER_NAME, str)
    assert isinstance(constants.SERVE_NAMESPACE, str)


def test_ray_serve_grpc_proxy_keeps_the_request_deserializer() -> None:
    """workbench/ray/grpc_relay.py (add_inference_service) registers the v2 service with no
    request deserializer so Serve's gRPC proxy hands requests on as bytes: the proxy's
    ``gRPCGenericServer._override_method_handler`` must replace the handlers and the response
    serializer only."""
    pytest.importorskip("ray.serve", reason="the ray extra")
    import grpc
    from ray.serve._private.grpc_util import gRPCGenericServer

    source = inspect.getsource(gRPCGenericServer._override_method_handler)
    assert "request_deserializer" not in source
    handler = grpc.unary_unary_rpc_method_handler(lambda request, context: request)
    assert handler.request_deserializer is None
