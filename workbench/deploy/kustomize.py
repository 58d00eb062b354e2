"""A kustomize layout over the generated manifests: ``k8s/kustomization.yaml`` is the base (the
manifests beside it), ``overlays/example/`` an overlay showing what a cluster changes (a
namespace, the image pushed to the cluster's registry), rendered with
``kubectl kustomize overlays/example`` and applied with ``kubectl apply -k overlays/example``.
The overlay is not under ``k8s/``: kustomize refuses a base folder that contains its overlay
("cycle detected").

Only kustomize fields that kubectl's current kustomize (v5) accepts without a deprecation
warning and that old ones (kubectl 1.20's kustomize v2.0.3, Debian bookworm's
``kubernetes-client``) know are used: ``resources``, ``namespace``, ``images``. Not
``replicas``: v2.0.3 refuses the field, and the HPA owns the replica count anyway.
"""

from __future__ import annotations

from workbench.deploy.spec import DeploySpec

_KUSTOMIZATION = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
#: the example overlay's namespace and registry (placeholders a user edits)
EXAMPLE_NAMESPACE = "models"
EXAMPLE_REGISTRY = "registry.example.com"


def image_name(image: str) -> str:
    """``image`` without its tag or digest (what a kustomization's ``images[].name`` matches):
    ``reg:5000/team/digits:1`` -> ``reg:5000/team/digits``."""
    name = image.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    last = last.split(":", 1)[0]
    return f"{head}/{last}" if head else last


def base(resources: list[str]) -> dict:
    """The base kustomization: ``resources`` (file names relative to ``k8s/``)."""
    return {**_KUSTOMIZATION, "resources": list(resources)}


def example_overlay(spec: DeploySpec) -> dict:
    """The example overlay (``overlays/example/kustomization.yaml``): the base ``../../k8s`` in
    namespace :data:`EXAMPLE_NAMESPACE`, with ``spec.image`` taken from
    :data:`EXAMPLE_REGISTRY` at tag ``1.0``."""
    last = image_name(spec.image).rpartition("/")[2]
    return {
        **_KUSTOMIZATION,
        "namespace": EXAMPLE_NAMESPACE,
        "resources": ["../../k8s"],
        "images": [{"name": image_name(spec.image), "newName": f"{EXAMPLE_REGISTRY}/{last}",
                    "newTag": "1.0"}],
    }


__all__ = ["EXAMPLE_NAMESPACE", "EXAMPLE_REGISTRY", "base", "example_overlay", "image_name"]
