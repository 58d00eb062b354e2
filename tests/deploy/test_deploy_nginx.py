"""``workbench deploy``'s nginx config (``nginx/nginx.conf``, :mod:`workbench.deploy.nginx`): the
replicas it balances, its retry policy, and, where Debian's nginx is installed, ``nginx -t``
accepting it run unprivileged from its own folder. The replicas behind a running nginx are
tests/production/test_nginx_replicas.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from workbench.deploy.nginx import NginxSpec, Replica, nginx_config
from workbench.hosts.cli import main
from workbench.testing.reload import write_add_sub


def test_replica_addresses_parse_with_a_default_grpc_port() -> None:
    assert Replica.parse("10.0.0.5:8000") == Replica("10.0.0.5", 8000, 8001)
    assert Replica.parse("replica-2:9000:9100") == Replica("replica-2", 9000, 9100)
    for bad in ("8000", ":8000", "host:x", "host:70000"):
        with pytest.raises(ValueError):
            Replica.parse(bad)


def test_config_balances_http_and_grpc_and_never_resends_a_sent_request() -> None:
    text = nginx_config(NginxSpec(replicas=(Replica("a", 8010, 8011), Replica("b", 8020, 8021))))
    assert "server a:8010 " in text and "server b:8020 " in text
    assert "server a:8011 " in text and "grpc_pass grpc://workbench_grpc;" in text
    assert "proxy_next_upstream error timeout;" in text
    assert "grpc_next_upstream error timeout;" in text
    assert "non_idempotent" not in text.split("events {")[1]  # only the header comment names it
    assert 'proxy_set_header Connection "";' in text and "proxy_http_version 1.1;" in text
    assert "client_max_body_size 256m;" in text
    assert "keepalive_timeout 4s;" in text  # below the replicas' 5 s keep-alive timeout


def test_deploy_writes_nginx_conf_for_the_replicas_given(tmp_path: Path) -> None:
    write_add_sub(tmp_path / "models")
    out = tmp_path / "out"
    assert main(["deploy", f"--model-repository={tmp_path / 'models'}", f"--out={out}",
                 "--no-models", "--nginx-replicas=10.1.0.1:8000,10.1.0.2:8000:9001"]) == 0
    text = (out / "nginx" / "nginx.conf").read_text()
    assert "server 10.1.0.1:8001 " in text and "server 10.1.0.2:9001 " in text
    assert "listen 8000 reuseport;" in text and "listen 8001 http2 reuseport;" in text
    with pytest.raises(SystemExit):
        main(["deploy", f"--model-repository={tmp_path / 'models'}", f"--out={out}",
              "--nginx-replicas=nohost"])


def test_nginx_accepts_the_config_unprivileged(tmp_path: Path) -> None:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        pytest.skip("nginx not installed (apt-get install nginx)")
    (tmp_path / "tmp").mkdir()
    (tmp_path / "nginx.conf").write_text(nginx_config(NginxSpec()))
    result = subprocess.run([nginx, "-t", "-p", str(tmp_path), "-c", "nginx.conf", "-e", "stderr"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "test is successful" in result.stderr
