"""The dashboard's ``workbench serve`` child process: defined in
:mod:`workbench.serving.serve_process` (the switch to headless shares it), named here for the
Headless tab."""

from workbench.serving.serve_process import DEFAULT_PORTS, LOG_LINES, ServeProcess, suggested_ports, taken_ports

__all__ = ["DEFAULT_PORTS", "LOG_LINES", "ServeProcess", "suggested_ports", "taken_ports"]
