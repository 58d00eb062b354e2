"""Offline schemas for the manifests ``workbench deploy`` writes, from packages only (no CRD file
of another project is committed here):

* Kubernetes' own kinds: ``kubernetes-validate`` (PyPI, dev extra), the OpenAPI schemas of
  each Kubernetes version in their *strict* form (unknown fields are errors, as
  ``kubectl apply``'s default ``--validate=strict`` makes them).
* The Prometheus operator's ServiceMonitor (and PrometheusRule): ``cloudcoil-models-prometheus-
  operator`` (PyPI, dev extra), pydantic models generated from the operator's CRDs; their JSON
  schema is taken with every object closed (``additionalProperties: false``, which the CRDs'
  structural schemas prune or, strictly validated, refuse). Checked: field names at every
  level, types, required fields, enums (``Literal``). Not checked: the CRDs' patterns, bounds
  and CEL rules, which the models do not carry.
* KServe's ServingRuntime and InferenceService: the models of KServe's Python SDK (the
  ``kserve`` wheel, which ``make setup`` downloads without installing it: its pins would
  downgrade pandas and psutil), read as data (``openapi_types``, ``attribute_map``, the
  setters' "must not be `None`") into a JSON schema whose Kubernetes types (``V1Container``,
  ``V1Volume``, ...) are kubernetes-validate's strict definitions. The SDK models and the CRDs
  are generated from the same Go types, so field names and types match. Checked: field names
  at every level, JSON types, required fields, and everything inside the Kubernetes types
  (probes, volumes, containers). Not checked: the CRDs' enums, patterns and webhook rules
  (KServe's admission webhook: e.g. that the runtime named exists and supports the format).
* Every quantity (requests, limits, ``sizeLimit``, ``averageValue``) against Kubernetes'
  quantity grammar, which the OpenAPI schemas leave as any string.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import referencing

#: the KServe SDK release whose models describe the CRDs (make setup downloads this wheel)
KSERVE_VERSION = "0.21.0"
#: types of the SDK models that the SDK has no model or Kubernetes type for: accepted unchecked
#: (ServingRuntime.spec.workerSpec, the autoscaling metrics' quantities, Knative's status)
KSERVE_UNCHECKED = frozenset({"V1alpha1WorkerSpec", "V1beta1MetricQuantity",
                              "KnativeDevServingPkgApisServingV1TrafficTarget"})
#: where make setup puts it (pip download --no-deps); WORKBENCH_KSERVE_WHEEL overrides
KSERVE_WHEEL_DIR = Path(sys.prefix) / "crd-wheels"
_K8S_DEFS_ID = "https://kubernetes.io/api/_definitions.json"


def kubernetes_versions(count: int = 4) -> list[str]:
    """The newest ``count`` Kubernetes minor versions kubernetes-validate has schemas for
    (Kubernetes supports the newest three; one more for clusters a release behind)."""
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate.utils", reason="kubernetes-validate not installed (dev extra)")
    return sorted(set(kubernetes_validate.all_versions()),
                  key=lambda v: tuple(map(int, v.split("."))))[-count:]


def validate_kubernetes(document: dict, version: str) -> None:
    """Validate a Kubernetes object against ``version``'s strict schema.

    Raises:
        jsonschema.ValidationError: the object does not validate.
        kubernetes_validate.utils.SchemaNotFoundError: a kind the version does not have.
    """
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate.utils", reason="kubernetes-validate not installed (dev extra)")
    kubernetes_validate.validate(document, version, strict=True)


@functools.cache
def _k8s_definitions(version: str) -> dict:
    from kubernetes_validate.utils import schema_contents

    return schema_contents(f"kubernetes-json-schema/v{version}-local-strict/_definitions.json",
                           version)


def _closed(schema: Any) -> Any:
    """``schema`` with every object that lists its properties closed to others."""
    if isinstance(schema, dict):
        out = {key: _closed(value) for key, value in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    return schema


@functools.cache
def prometheus_operator_schema(kind: str) -> dict:
    """The JSON schema of the operator's ``monitoring.coreos.com/v1`` ``kind`` (closed)."""
    models = pytest.importorskip(
        "cloudcoil.models.prometheus_operator.v1",
        reason="cloudcoil-models-prometheus-operator not installed (dev extra)")
    return _closed(getattr(models, kind).model_json_schema(by_alias=True))


def validate_prometheus_operator(document: dict) -> None:
    """Validate a ServiceMonitor / PrometheusRule (``monitoring.coreos.com/v1``).

    Raises:
        jsonschema.ValidationError: the object does not validate.
    """
    assert document["apiVersion"] == "monitoring.coreos.com/v1", document["apiVersion"]
    jsonschema.Draft202012Validator(prometheus_operator_schema(document["kind"])).validate(document)


def kserve_wheel() -> Path:
    """The kserve wheel (``WORKBENCH_KSERVE_WHEEL`` or ``make setup``'s download); skips the
    test when there is none."""
    if os.environ.get("WORKBENCH_KSERVE_WHEEL"):
        return Path(os.environ["WORKBENCH_KSERVE_WHEEL"])
    found = sorted(KSERVE_WHEEL_DIR.glob(f"kserve-{KSERVE_VERSION}-*.whl"))
    if not found:
        pytest.skip(f"the kserve wheel is not downloaded (make setup: pip download --no-deps "
                    f"--only-binary=:all: -d {KSERVE_WHEEL_DIR} kserve=={KSERVE_VERSION})")
    return found[-1]


def _class_model(source: str) -> tuple[str, dict, dict, set] | None:
    """(class name, openapi_types, attribute_map, required python names) of a model file."""
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            tables = {}
            for item in node.body:
                if isinstance(item, ast.Assign) and len(item.targets) == 1 \
                        and isinstance(item.targets[0], ast.Name) \
                        and item.targets[0].id in ("openapi_types", "attribute_map"):
                    tables[item.targets[0].id] = ast.literal_eval(item.value)
            if len(tables) == 2:
                required = set(re.findall(r"Invalid value for `(\w+)`, must not be `None`", source))
                return node.name, tables["openapi_types"], tables["attribute_map"], required
    return None


@functools.cache
def _kserve_models(wheel: Path) -> dict[str, tuple[dict, dict, set]]:
    models = {}
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith("kserve/models/") and name.endswith(".py"):
                parsed = _class_model(archive.read(name).decode("utf-8"))
                if parsed:
                    models[parsed[0]] = parsed[1:]
    return models


_SCALARS = {"str": {"type": "string"}, "int": {"type": "integer"}, "bool": {"type": "boolean"},
            "float": {"type": "number"}, "datetime": {"type": "string"}, "object": {},
            "date": {"type": "string"}}
_K8S_CLASS = re.compile(r"^(?:K8sIoApi([A-Z][a-z]+))?(V\d+(?:alpha\d+|beta\d+)?)([A-Z]\w*)$")


def _k8s_ref(name: str, definitions: dict) -> str | None:
    """The kubernetes-validate definition of a kubernetes-client class name, or None."""
    if name == "ResourceQuantity":
        return "io.k8s.apimachinery.pkg.api.resource.Quantity"
    match = _K8S_CLASS.match(name)
    if not match:
        return None
    group, version, kind = match.groups()
    candidates = [key for key in definitions if key.endswith(f".{version.lower()}.{kind}")]
    if group:
        candidates = [key for key in candidates if key.startswith(f"io.k8s.api.{group.lower()}.")]
    for prefix in ("io.k8s.api.core.", "io.k8s.apimachinery.pkg.apis.meta.", ""):
        preferred = [key for key in candidates if key.startswith(prefix)]
        if len(preferred) == 1 or (preferred and prefix):
            return preferred[0]
    return None


class _KServeSchema:
    def __init__(self, wheel: Path, version: str) -> None:
        self.models = _kserve_models(wheel)
        self.k8s = _k8s_definitions(version)["$defs"]
        self.defs: dict[str, dict] = {}
        #: type names found in the models that the schema accepts unchecked
        self.unchecked: set[str] = set()

    def type_schema(self, openapi_type: str) -> dict:
        if openapi_type in _SCALARS:
            return _SCALARS[openapi_type]
        if openapi_type.startswith("list[") and openapi_type.endswith("]"):
            return {"type": "array", "items": self.type_schema(openapi_type[5:-1])}
        if openapi_type.startswith("dict(str, ") and openapi_type.endswith(")"):
            return {"type": "object",
                    "additionalProperties": self.type_schema(openapi_type[10:-1])}
        if openapi_type in self.models:
            self.define(openapi_type)
            return {"$ref": f"#/$defs/{openapi_type}"}
        ref = _k8s_ref(openapi_type, self.k8s)
        if ref:
            return {"$ref": f"{_K8S_DEFS_ID}#/$defs/{ref}"}
        self.unchecked.add(openapi_type)
        return {}

    def define(self, name: str) -> None:
        if name in self.defs:
            return
        self.defs[name] = {}  # recursion guard
        types, attributes, required = self.models[name]
        self.defs[name] = {
            "type": "object",
            "properties": {attributes[field]: self.type_schema(kind)
                           for field, kind in types.items()},
            "required": sorted(attributes[field] for field in required if field in attributes),
            "additionalProperties": False,
        }


@functools.cache
def kserve_schema(kind: str, api_version: str, k8s_version: str) -> tuple[dict, frozenset[str]]:
    """The JSON schema of KServe's ``kind`` (e.g. ``ServingRuntime``) built from the SDK
    models of :func:`kserve_wheel`, and the type names it leaves unchecked."""
    wheel = kserve_wheel()
    group_version = api_version.rpartition("/")[2].capitalize()
    builder = _KServeSchema(wheel, k8s_version)
    root = f"{group_version}{kind}"
    assert root in builder.models, f"kserve {KSERVE_VERSION} has no model {root}"
    builder.define(root)
    top = builder.defs[root]
    top["properties"]["apiVersion"] = {"const": api_version}
    top["properties"]["kind"] = {"const": kind}
    top["required"] = sorted({"apiVersion", "kind", "metadata", "spec", *top["required"]})
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema",
              "$ref": f"#/$defs/{root}", "$defs": builder.defs}
    return schema, frozenset(builder.unchecked)


def validate_kserve(document: dict, k8s_version: str) -> None:
    """Validate a KServe object (``serving.kserve.io/*``) against :func:`kserve_schema`.

    Raises:
        jsonschema.ValidationError: the object does not validate.
    """
    schema, _ = kserve_schema(document["kind"], document["apiVersion"], k8s_version)
    definitions = referencing.Resource.from_contents(_k8s_definitions(k8s_version))
    registry = referencing.Registry().with_resource(_K8S_DEFS_ID, definitions)
    jsonschema.Draft202012Validator(schema, registry=registry).validate(document)


#: Kubernetes' quantity grammar (apimachinery's resource.Quantity: a signed decimal, then a
#: binary or decimal SI suffix or an exponent), which the OpenAPI schemas leave as any string
_QUANTITY = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
#: the fields of the generated manifests that hold quantities (a map of them, or one)
_QUANTITY_MAPS = ("requests", "limits")
_QUANTITY_FIELDS = ("sizeLimit", "averageValue")


def check_quantities(document: Any, path: str = "") -> None:
    """Check every quantity of ``document`` (resources' requests and limits, an emptyDir's
    ``sizeLimit``, an HPA target's ``averageValue``) against Kubernetes' grammar.

    Raises:
        jsonschema.ValidationError: a value the API server would refuse as a quantity.
    """
    if isinstance(document, list):
        for index, item in enumerate(document):
            check_quantities(item, f"{path}[{index}]")
        return
    if not isinstance(document, dict):
        return
    for key, value in document.items():
        values = value.items() if key in _QUANTITY_MAPS and isinstance(value, dict) else \
            [(key, value)] if key in _QUANTITY_FIELDS else []
        for name, quantity in values:
            if not (isinstance(quantity, (int, float)) or _QUANTITY.match(str(quantity))):
                raise jsonschema.ValidationError(f"{path}.{key}: {name} {quantity!r} is not a "
                                                 "Kubernetes quantity")
        if not values:
            check_quantities(value, f"{path}.{key}")


def validate_object(document: dict, k8s_version: str) -> None:
    """Validate any object ``workbench deploy`` writes, by its API group (see the module
    docstring for what each check covers), and its quantities (:func:`check_quantities`)."""
    group = document["apiVersion"].rpartition("/")[0]
    if group == "monitoring.coreos.com":
        validate_prometheus_operator(document)
    elif group == "serving.kserve.io":
        validate_kserve(document, k8s_version)
    else:
        validate_kubernetes(document, k8s_version)
    check_quantities(document)


def dumps(document: dict) -> str:
    """Compact JSON of ``document`` (assertion messages)."""
    return json.dumps(document, sort_keys=True)[:400]


__all__ = ["KSERVE_UNCHECKED", "KSERVE_VERSION", "check_quantities", "kserve_schema",
           "kserve_wheel", "kubernetes_versions", "prometheus_operator_schema", "validate_kserve",
           "validate_kubernetes", "validate_object", "validate_prometheus_operator"]
