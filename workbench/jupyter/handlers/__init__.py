"""The workbench REST handlers (``{base_url}/workbench/api/...``), one module per resource;
:mod:`workbench.jupyter.routes` maps them to URLs."""
