"""``RemoteServer``: a KServe v2 server (``workbench serve``, Triton) reached by URL, with the
subset of :class:`workbench.Server`'s surface the dashboard's tabs use.

Routes (Triton's HTTP API and extensions): ``GET /v2/health/live|ready``, ``GET /v2``,
``POST /v2/repository/index``, ``GET /v2/models/<m>[/versions/<v>]`` (metadata),
``.../config``, ``GET /v2/models/stats``, ``POST /v2/repository/models/<m>/load`` (with
``{"parameters": {"config": "<json>"}}`` for an override) and ``.../unload``.

Several replicas (a list of URLs): the index is merged (a version is READY when a replica
serves it, and the reason then names each replica's state where they differ), loads and
unloads go to every replica, configs and metadata come from the first replica that answers,
statistics are summed (:meth:`RemoteServer.statistics`) or read per replica
(:meth:`RemoteServer.replica_statistics`).

Headers (e.g. a restricted API's key, Triton's ``--http-restricted-api``) are held in memory
for the session only: never shown, logged, repr'd or written anywhere.

Errors: a refused call raises the :class:`workbench.WorkbenchError` of its HTTP status with
the server's ``{"error": ...}`` text (Triton's wording): "no available versions" / "not ready" /
"not at ready state" -> ``ModelNotReady``, else 404 or "unknown model" -> ``ModelNotFound``, other 400 ->
``InvalidArgument``, 403 -> ``Unavailable`` (the restricted API), 503 -> ``Unavailable``,
501 -> ``Unsupported``; a server that cannot be reached -> ``Unavailable`` naming its URL.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
from google.protobuf import json_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench import (
    InternalError,
    InvalidArgument,
    ModelNotFound,
    ModelNotReady,
    ServerOptions,
    Unavailable,
    Unsupported,
    WorkbenchError,
)
from workbench.remote.config_files import RemoteConfigFiles

#: seconds one HTTP call may take (a load can take long: it has its own)
CALL_TIMEOUT_S = 10.0
#: seconds a load or unload may take
LOAD_TIMEOUT_S = 600.0


@dataclass(frozen=True, slots=True)
class RemoteMemory:
    """One entry of a version's ``memory_usage`` (Triton's ``MemoryUsage``).

    Attributes:
        kind: ``CPU``, ``CPU_PINNED`` or ``GPU`` (Triton's ``type``).
        id: device id.
        byte_size: bytes.
        estimate: always False (a remote server's figure is what it reports).
    """

    kind: str
    id: int
    byte_size: int
    estimate: bool = False


@dataclass(frozen=True, slots=True)
class RemoteVersionStats:
    """One model version's cumulative counters as the statistics API reports them (summed over
    replicas). Times are **nanoseconds** (Triton's ``ns`` fields).

    Attributes:
        executions: backend executions by batch size (``batch_stats[].compute_infer.count``).
        pending: requests queued at the server (``nv_inference_pending_request_count`` from
            ``/metrics`` where read, else 0).
        quantiles_us: request-latency quantiles, **microseconds**, by quantile (0.5, 0.99, ...)
            from ``/metrics`` summaries where the server exports them (a recent window, not
            the interval); {} otherwise. Over replicas: the highest.
    """

    name: str
    version: str
    inference_count: int = 0
    execution_count: int = 0
    success_count: int = 0
    success_ns: int = 0
    fail_count: int = 0
    queue_ns: int = 0
    compute_ns: int = 0
    executions: dict[int, int] = field(default_factory=dict)
    memory_usage: tuple[RemoteMemory, ...] = ()
    pending: int = 0
    quantiles_us: dict[float, float] = field(default_factory=dict)

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> RemoteVersionStats:
        """From one ``model_stats`` entry of ``GET /v2/models/stats`` (counts arrive as
        numbers or, from some clients' JSON, strings)."""
        stats = data.get("inference_stats") or {}

        def count(key: str) -> int:
            return int((stats.get(key) or {}).get("count", 0))

        def ns(key: str) -> int:
            return int((stats.get(key) or {}).get("ns", 0))

        executions = {int(b["batch_size"]): int((b.get("compute_infer") or {}).get("count", 0))
                      for b in data.get("batch_stats") or ()}
        memory = tuple(RemoteMemory(str(m.get("type", "CPU")), int(m.get("id", 0)), int(m.get("byte_size", 0)))
                       for m in data.get("memory_usage") or ())
        return cls(name=str(data["name"]), version=str(data.get("version", "")),
                   inference_count=int(data.get("inference_count", 0)),
                   execution_count=int(data.get("execution_count", 0)),
                   success_count=count("success"), success_ns=ns("success"), fail_count=count("fail"),
                   queue_ns=ns("queue"),
                   compute_ns=ns("compute_input") + ns("compute_infer") + ns("compute_output"),
                   executions=executions, memory_usage=memory)

    def plus(self, other: RemoteVersionStats) -> RemoteVersionStats:
        """The sum of two replicas' counters of the same version."""
        executions = dict(self.executions)
        for size, n in other.executions.items():
            executions[size] = executions.get(size, 0) + n
        return RemoteVersionStats(
            self.name, self.version, self.inference_count + other.inference_count,
            self.execution_count + other.execution_count, self.success_count + other.success_count,
            self.success_ns + other.success_ns, self.fail_count + other.fail_count,
            self.queue_ns + other.queue_ns, self.compute_ns + other.compute_ns, executions,
            self.memory_usage + other.memory_usage, self.pending + other.pending,
            {q: max(v, other.quantiles_us.get(q, 0.0)) for q, v in self.quantiles_us.items()} | {
                q: v for q, v in other.quantiles_us.items() if q not in self.quantiles_us})


def normalize_url(url: str) -> str:
    """``host:8000`` -> ``http://host:8000`` (no trailing slash).

    Raises:
        ValueError: empty, or a scheme other than http / https.
    """
    url = url.strip().rstrip("/")
    if not url:
        raise ValueError("no server URL given")
    if "://" not in url:
        url = "http://" + url
    scheme = url.split("://", 1)[0].lower()
    if scheme not in ("http", "https"):
        raise ValueError(f"'{url}': only http:// and https:// servers can be attached")
    return url


def parse_urls(text: str | Sequence[str]) -> list[str]:
    """One URL or several (a list, or text separated by commas / whitespace), normalized,
    duplicates dropped.

    Raises:
        ValueError: as :func:`normalize_url`.
    """
    items = text.replace(",", " ").split() if isinstance(text, str) else list(text)
    urls = list(dict.fromkeys(normalize_url(u) for u in items if u.strip()))
    if not urls:
        raise ValueError("no server URL given")
    return urls


def error_of(status: int, message: str) -> WorkbenchError:
    """The :class:`WorkbenchError` of a refused call (see the module docstring)."""
    lowered = message.lower()
    if any(words in lowered for words in ("no available version", "not ready", "not at ready state")):
        return ModelNotReady(message)  # Triton: "Request for unknown model: 'm' has no available versions"
    if status == 404 or "unknown model" in lowered:
        return ModelNotFound(message)
    if status == 403:
        return Unavailable(f"forbidden (403): {message}")
    if status == 501:
        return Unsupported(message)
    if status == 503:
        return Unavailable(message)
    if 400 <= status < 500:
        return InvalidArgument(message)
    return InternalError(message)


#: a cluster ingress's per-replica statistics (``workbench ray-serve``; a product extension)
CLUSTER_REPLICAS_PATH = "/v2/cluster/replicas"


class RemoteServer:
    """A v2 server (or several replicas of one) attached by URL.

    Args:
        urls: ``http://host:8000``, or a list of replicas' URLs (``host:port`` takes http).
        headers: sent with every call (a restricted API's key): kept in memory only.
        metrics_urls: each replica's Prometheus ``/metrics`` URL, in the order of ``urls``
            (pending requests, latency quantiles; Triton serves it on port 8002; one beyond
            the replicas' count is not read); None: not read.
        timeout_s: seconds per call (loads and unloads: :data:`LOAD_TIMEOUT_S`).

    Raises:
        ValueError: no URL, or not http(s).
    """

    def __init__(self, urls: str | Sequence[str], headers: Mapping[str, str] | None = None,
                 metrics_urls: Sequence[str] | None = None, timeout_s: float = CALL_TIMEOUT_S) -> None:
        self.urls = parse_urls(urls)
        self.metrics_urls = [u.strip() for u in metrics_urls or () if u.strip()]
        #: sent with every call (also by the Tuning tab's loads); never shown or written
        self.headers = dict(headers or {})
        self._client = httpx.AsyncClient(headers=self.headers, timeout=timeout_s)
        self._stats: list[RemoteVersionStats] = []
        #: URL -> whether it is a cluster's ingress answering ``GET /v2/cluster/replicas``
        #: (``workbench ray-serve``: its replicas are read through it); unknown until read
        self.clusters: dict[str, bool] = {}
        #: the replicas the last :meth:`replica_statistics` read, by name (a URL, or
        #: ``<url> replica <id>`` behind a cluster's ingress)
        self.replica_names: list[str] = list(self.urls)
        #: the Config tab's file service (the load API's ``config`` override)
        self.config_files = RemoteConfigFiles(self)

    @property
    def url(self) -> str:
        """The first replica's URL."""
        return self.urls[0]

    @property
    def label(self) -> str:
        """``http://host:8000``, or ``3 replicas: http://a:8000, ...``."""
        return self.url if len(self.urls) == 1 else f"{len(self.urls)} replicas: {', '.join(self.urls)}"

    @property
    def options(self) -> ServerOptions:
        """Refused: an attached server's flags are its own, not known here (the engine's
        ``options`` serve only tabs that need an engine in this process, e.g. Headless).

        Raises:
            Unsupported: always.
        """
        raise Unsupported(f"{self.label} is attached: its options are not known here")

    def __repr__(self) -> str:  # never the headers
        return f"RemoteServer({self.label})"

    # ----------------------------------------------------------------- HTTP
    async def call(self, url: str, method: str, path: str, body: Any = None,
                   timeout_s: float | None = None) -> Any:
        """One call to the replica at ``url``: the JSON answer (None when empty).

        Raises:
            WorkbenchError: refused (:func:`error_of`) or not reachable (``Unavailable``).
        """
        try:
            response = await self._send(method, url + path, json=body,
                                        timeout=timeout_s if timeout_s is not None else httpx.USE_CLIENT_DEFAULT)
        except httpx.HTTPError as exc:
            raise Unavailable(f"cannot reach {url}: {type(exc).__name__} {exc}".rstrip()) from exc
        data: Any = None
        if response.content:
            try:
                data = response.json()
            except ValueError:
                data = {"error": response.text[:500]}
        if response.status_code >= 400:
            text = data.get("error", "") if isinstance(data, dict) else ""
            raise error_of(response.status_code, text or f"HTTP {response.status_code} from {url}{path}")
        return data

    async def _send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """One HTTP request on the shared client.

        Raises:
            httpx.HTTPError: not reachable.
            Unavailable: :meth:`close` was called (a refresh still running when the dashboard
                attached elsewhere: said as a detached server, never an unexpected error).
        """
        if self._client.is_closed:
            raise Unavailable(f"detached from {self.label}")
        try:
            return await self._client.request(method, url, **kwargs)
        except RuntimeError as exc:  # httpx: "Cannot send a request, as the client has been closed."
            if self._client.is_closed:
                raise Unavailable(f"detached from {self.label}") from exc
            raise

    async def _first(self, method: str, path: str) -> Any:
        """The first replica's answer that is not an error (the first error otherwise)."""
        first: WorkbenchError | None = None
        for url in self.urls:
            try:
                return await self.call(url, method, path)
            except WorkbenchError as exc:
                first = first or exc
        assert first is not None
        raise first

    async def _every(self, method: str, path: str, body: Any = None, timeout_s: float | None = None) -> None:
        """The call on every replica at once; raises the first failure, naming its replica
        when there are several."""
        results = await asyncio.gather(*(self.call(u, method, path, body, timeout_s) for u in self.urls),
                                       return_exceptions=True)
        for url, result in zip(self.urls, results, strict=True):
            if isinstance(result, WorkbenchError):
                if len(self.urls) > 1:
                    raise type(result)(f"{url}: {result.message}")
                raise result
            if isinstance(result, BaseException):
                raise result

    # ----------------------------------------------------------------- the engine's surface
    async def health(self) -> dict[str, dict[str, Any]]:
        """Each replica's ``{"live": bool, "ready": bool, "error": str}`` (``/v2/health/*``;
        ``error``: why it could not be asked, "" otherwise)."""
        async def one(url: str) -> dict[str, Any]:
            out: dict[str, Any] = {"live": False, "ready": False, "error": ""}
            for kind in ("live", "ready"):
                try:
                    response = await self._send("GET", f"{url}/v2/health/{kind}")
                    out[kind] = response.status_code == 200
                except (httpx.HTTPError, Unavailable) as exc:
                    out["error"] = f"{type(exc).__name__} {exc}".rstrip()
                    break
            return out
        answers = await asyncio.gather(*(one(u) for u in self.urls))
        return dict(zip(self.urls, answers, strict=True))

    async def server_metadata(self) -> dict[str, Any]:
        """``GET /v2`` of the first replica that answers (name, version, extensions)."""
        return await self._first("GET", "/v2")

    async def replica_index(self) -> dict[str, list[dict[str, Any]] | WorkbenchError]:
        """Each replica's repository index (or the error it answered)."""
        results = await asyncio.gather(*(self.call(u, "POST", "/v2/repository/index", {}) for u in self.urls),
                                       return_exceptions=True)
        out: dict[str, list[dict[str, Any]] | WorkbenchError] = {}
        for url, result in zip(self.urls, results, strict=True):
            if isinstance(result, BaseException) and not isinstance(result, WorkbenchError):
                raise result
            out[url] = result if isinstance(result, WorkbenchError) else list(result or [])
        return out

    async def repository_index(self, ready: bool = False) -> list[dict[str, Any]]:
        """Triton's repository index (``name``, ``version``, ``state``, ``reason``), merged over
        the replicas (see the module docstring), by name then version; it also refreshes
        :meth:`model_statistics`.

        Raises:
            WorkbenchError: no replica answered (the first one's error).
        """
        indexes, _ = await asyncio.gather(self.replica_index(), self.statistics(quiet=True, metrics=False))
        answered = {url: rows for url, rows in indexes.items() if not isinstance(rows, WorkbenchError)}
        if not answered:
            first = next(iter(indexes.values()))
            assert isinstance(first, WorkbenchError)
            raise first
        merged: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        for url, rows in answered.items():
            for row in rows:
                merged.setdefault((str(row["name"]), str(row.get("version", ""))), {})[url] = row
        _fold_unversioned(merged)
        out = []
        for (name, version), by_url in sorted(merged.items(), key=lambda kv: (kv[0][0], _version_key(kv[0][1]))):
            out.append(_merged_row(name, version, by_url, list(self.urls), indexes))
        if ready:
            out = [row for row in out if row["state"] == "READY"]
        return out

    async def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        """``GET /v2/models/<m>[/versions/<v>]``."""
        return await self._first("GET", _model_path(name, version))

    async def model_config_json(self, name: str, version: str = "") -> dict[str, Any]:
        """``GET /v2/models/<m>[/versions/<v>]/config``: the served config as Triton's JSON."""
        return await self._first("GET", _model_path(name, version) + "/config")

    async def model_config(self, name: str, version: str = "") -> ModelConfig:
        """The served config as a ``ModelConfig`` message (unknown fields of a newer server
        ignored)."""
        data = await self.model_config_json(name, version)
        return json_format.ParseDict(data.get("config", data), ModelConfig(), ignore_unknown_fields=True)

    async def statistics(self, quiet: bool = False, metrics: bool = True) -> list[RemoteVersionStats]:
        """``GET /v2/models/stats`` of every replica, summed per version (with the pending
        requests of ``/metrics`` where :attr:`metrics_urls` are given), by name then version;
        kept for :meth:`model_statistics`.

        Args:
            quiet: a replica that fails is left out (else its error is raised).
            metrics: read ``/metrics`` too (pending requests, latency quantiles); False for
                the counters alone (the Models table's refresh: its memory column).
        """
        return self.summed(await self.replica_statistics(metrics), quiet)

    async def replica_statistics(self, metrics: bool = True) -> dict[str, list[RemoteVersionStats] | BaseException]:
        """Each replica's own counters (``GET /v2/models/stats``, with its pending requests
        and latency quantiles from its ``/metrics``: the i-th of :attr:`metrics_urls` is the
        i-th replica's), by replica URL; a replica that failed: its error. One read per
        replica, at once (the Live tab's overlay per replica, and :meth:`summed`)."""
        calls = [self._stats_or_cluster(url) for url in self.urls]
        metric_calls = [self._metrics(url) for url in self.metrics_urls[:len(self.urls)]] if metrics else []
        results = await asyncio.gather(*calls, *metric_calls, return_exceptions=True)
        reads = results[len(calls):]
        out: dict[str, list[RemoteVersionStats] | BaseException] = {}
        for index, (url, result) in enumerate(zip(self.urls, results[:len(calls)], strict=True)):
            if isinstance(result, BaseException):
                out[url] = result
                continue
            if self.clusters.get(url):  # one row per replica behind the ingress (no /metrics of its own)
                for row in result["replicas"]:
                    name = f"{url} replica {row['replica']}"
                    if row.get("status") != 200:
                        out[name] = error_of(int(row.get("status", 503)), str(row["stats"].get("error", "")))
                        continue
                    out[name] = [RemoteVersionStats.of(entry) for entry in row["stats"].get("model_stats", ())]
                continue
            metric = reads[index] if index < len(reads) else None
            read = metric if isinstance(metric, dict) else {}
            stats = [RemoteVersionStats.of(entry) for entry in (result or {}).get("model_stats", ())]
            out[url] = [_with_metrics(s, read.get((s.name, s.version))) for s in stats]
        self.replica_names = list(out)
        return out

    async def _stats_or_cluster(self, url: str) -> Any:
        """``GET /v2/cluster/replicas`` of a cluster's ingress (each replica's
        ``/v2/models/stats``, docs/ray.md), else ``GET /v2/models/stats``. Whether ``url`` is
        an ingress is learned on the first read: a server without the route (Triton, ``workbench
        serve``) refuses it (404/400) and is read as one server from then on."""
        if self.clusters.get(url) is not False:
            try:
                data = await self.call(url, "GET", CLUSTER_REPLICAS_PATH)
            except Unavailable:
                raise
            except WorkbenchError:
                self.clusters[url] = False
            else:
                if isinstance(data, dict) and isinstance(data.get("replicas"), list):
                    self.clusters[url] = True
                    return data
                self.clusters[url] = False
        return await self.call(url, "GET", "/v2/models/stats")

    def summed(self, replicas: Mapping[str, list[RemoteVersionStats] | BaseException],
               quiet: bool = False) -> list[RemoteVersionStats]:
        """:meth:`replica_statistics`' answers summed per version (the highest quantile over
        replicas: no sum of quantiles exists), by name then version; kept for
        :meth:`model_statistics`.

        Raises:
            WorkbenchError: a replica failed and not ``quiet`` (any other exception: always).
        """
        totals: dict[tuple[str, str], RemoteVersionStats] = {}
        for result in replicas.values():
            if isinstance(result, BaseException):
                if quiet and isinstance(result, WorkbenchError):
                    continue
                raise result
            for stats in result:
                key = (stats.name, stats.version)
                totals[key] = totals[key].plus(stats) if key in totals else stats
        self._stats = [totals[key] for key in sorted(totals, key=lambda k: (k[0], _version_key(k[1])))]
        return self._stats

    def model_statistics(self) -> list[RemoteVersionStats]:
        """The counters the last :meth:`statistics` (or :meth:`repository_index`) read."""
        return list(self._stats)

    async def load_model(self, name: str, config: str | dict[str, Any] | None = None,
                         files: dict[str, bytes] | None = None) -> None:
        """``POST /v2/repository/models/<m>/load`` on every replica; ``config`` (a dict or
        its JSON text) is sent as Triton's ``parameters.config`` override.

        Raises:
            Unsupported: ``files`` (not sent over this client).
            WorkbenchError: a replica refused (e.g. not in explicit model control mode:
                Triton's "explicit model load / unload is not allowed if polling is enabled").
        """
        if files:
            raise Unsupported("loading with file overrides is not supported on an attached server")
        body: dict[str, Any] = {}
        if config is not None:
            body["parameters"] = {"config": config if isinstance(config, str) else json.dumps(config)}
        await self._every("POST", f"/v2/repository/models/{_quote(name)}/load", body, LOAD_TIMEOUT_S)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """``POST /v2/repository/models/<m>/unload`` on every replica."""
        body = {"parameters": {"unload_dependents": True}} if unload_dependents else {}
        await self._every("POST", f"/v2/repository/models/{_quote(name)}/unload", body, LOAD_TIMEOUT_S)

    async def close(self) -> None:
        """Close the HTTP connections (the server keeps running)."""
        await self._client.aclose()

    async def _metrics(self, metrics_url: str) -> dict[tuple[str, str], tuple[int, dict[float, float]]]:
        """From one replica's ``/metrics``, by (model, version): the pending requests
        (``nv_inference_pending_request_count``) and the request-latency quantiles, **µs**
        (``nv_inference_request_summary_us``, exported with ``--metrics-config
        summary_latencies=true`` by Triton and by workbench); {} when it cannot be read."""
        try:
            response = await self._send("GET", metrics_url)
        except (httpx.HTTPError, Unavailable):
            return {}
        if response.status_code != 200:
            return {}
        from prometheus_client.parser import text_string_to_metric_families

        pending: dict[tuple[str, str], int] = {}
        quantiles: dict[tuple[str, str], dict[float, float]] = {}
        try:
            for family in text_string_to_metric_families(response.text):
                for sample in family.samples:
                    key = (sample.labels.get("model", ""), sample.labels.get("version", ""))
                    if sample.name == "nv_inference_pending_request_count":
                        pending[key] = pending.get(key, 0) + int(sample.value)
                    elif (sample.name == "nv_inference_request_summary_us" and "quantile" in sample.labels
                          and sample.value == sample.value):  # NaN: no request in the summary's window
                        quantiles.setdefault(key, {})[float(sample.labels["quantile"])] = sample.value
        except ValueError:
            return {}
        return {key: (pending.get(key, 0), quantiles.get(key, {})) for key in {*pending, *quantiles}}


def _with_metrics(stats: RemoteVersionStats, read: tuple[int, dict[float, float]] | None) -> RemoteVersionStats:
    """``stats`` with its replica's pending requests and latency quantiles (``/metrics``)."""
    if read is None:
        return stats
    count, quantiles = read
    return replace(stats, pending=stats.pending + count, quantiles_us={**stats.quantiles_us, **quantiles})


def _quote(name: str) -> str:
    from urllib.parse import quote

    return quote(name, safe="")


def _model_path(name: str, version: str) -> str:
    return f"/v2/models/{_quote(name)}" + (f"/versions/{_quote(version)}" if version else "")


def _version_key(version: str) -> tuple[int, str]:
    return (int(version), "") if version.isdigit() else (-1, version)


def _fold_unversioned(merged: dict[tuple[str, str], dict[str, dict[str, Any]]]) -> None:
    """A replica that lists a model without a version (Triton's row of a model not loaded
    there) while another lists its versions: that row is the replica's state of each of those
    versions, not a row of its own (one row per version, READY when any replica serves it).
    Changes ``merged`` in place."""
    for name, version in [key for key in merged if key[1] == ""]:
        versions = [key for key in merged if key[0] == name and key[1] != ""]
        if not versions:
            continue
        for url, row in merged.pop((name, version)).items():
            for key in versions:
                merged[key].setdefault(url, row)


def _merged_row(name: str, version: str, by_url: dict[str, dict[str, Any]], urls: list[str],
                indexes: Mapping[str, Any]) -> dict[str, Any]:
    """One index row over the replicas: READY when one serves it; where the replicas differ
    the reason names each one's state."""
    states = {url: (str(row.get("state", "")), str(row.get("reason", ""))) for url, row in by_url.items()}
    if len(urls) == 1:
        state, reason = states[urls[0]]
        row = {"name": name, "state": state, "reason": reason}
        return {**row, "version": version} if version else row
    ready = any(state == "READY" for state, _ in states.values())
    first_state, first_reason = next(iter(states.values()))
    words = []
    for url in urls:
        refused = indexes.get(url)
        if isinstance(refused, WorkbenchError):  # unreachable, or refused in its words (a 403's header)
            cause = refused.message.removeprefix(f"cannot reach {url}: ")
            words.append(f"{url}: not answering ({cause})" if cause != refused.message else f"{url}: {cause}")
        elif url not in states:
            words.append(f"{url}: not in its index")
        else:
            state, reason = states[url]
            words.append(f"{url}: {state or 'not loaded'}" + (f" ({reason})" if reason else ""))
    same = len({s for s in states.values()}) == 1 and len(states) == len(urls)
    row = {"name": name, "state": "READY" if ready else first_state,
           "reason": first_reason if same else "; ".join(words)}
    return {**row, "version": version} if version else row


__all__ = ["CALL_TIMEOUT_S", "LOAD_TIMEOUT_S", "RemoteMemory", "RemoteServer", "RemoteVersionStats",
           "error_of", "normalize_url", "parse_urls"]
