"""Deployment files for a model repository: a Dockerfile and Kubernetes manifests
(Deployment with health probes and a memory ``/dev/shm``, Service, HPA on queue time,
Prometheus scrape annotations and the adapter rule the HPA assumes).

Pure text generation; used by ``workbench deploy --out DIR`` and the dashboard's Headless
tab. Nothing here talks to Docker or a cluster.
"""

from workbench.deploy.python_imports import PythonRequirements, python_requirements
from workbench.deploy.spec import DeploySpec
from workbench.deploy.writer import render, required_extras, write_deployment

__all__ = ["DeploySpec", "PythonRequirements", "python_requirements", "render", "required_extras",
           "write_deployment"]
