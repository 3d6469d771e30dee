"""The production compose file: Prometheus scrapes the workers' metrics port, and Kafka
protects its topics with SASL and ACLs for applications. Read as YAML here (no Docker
engine in CI); where docker compose is installed, its own validation runs as well."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any
from urllib.parse import urlparse

import yaml

from tests.support.paths import ROOT


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def test_prometheus_scrapes_the_port_the_workers_serve_metrics_on() -> None:
    services = _compose()["services"]
    worker_env = services["memstream-worker"]["environment"]
    port = int(worker_env["MEMSTREAM_METRICS__PORT"])
    assert worker_env["MEMSTREAM_METRICS__HOST"] == "0.0.0.0"  # noqa: S104 - in the container
    prometheus = services["prometheus"]
    mounted = [v.split(":")[0] for v in prometheus["volumes"]]
    assert "./deploy/prometheus.yml" in mounted
    config = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    targets = [(sd["names"], sd["port"]) for job in config["scrape_configs"]
               for sd in job.get("dns_sd_configs", [])]
    assert (["memstream-worker"], port) in targets


def test_kafka_requires_sasl_and_acls_for_applications() -> None:
    services = _compose()["services"]
    kafka = services["kafka"]["environment"]
    protocols = dict(p.split(":") for p in kafka["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert protocols["APPS"] == "SASL_PLAINTEXT"
    assert kafka["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] == "false"
    assert "StandardAuthorizer" in kafka["KAFKA_AUTHORIZER_CLASS_NAME"]
    script = "\n".join(services["kafka-acls"]["command"])
    assert "--allow-principal User:agent-app" in script
    assert "memory.updates" in script and "conversations" in script
    compose = shutil.which("docker-compose")
    if compose is not None:  # Debian's compose v1 validates the file without the v2 `name:`
        text = "\n".join(line for line in (ROOT / "docker-compose.yml").read_text().splitlines()
                         if not line.startswith("name:"))
        done = subprocess.run([compose, "-f", "-", "--project-directory", str(ROOT), "config",
                               "-q"], input=text, text=True, capture_output=True, check=False)
        assert done.returncode == 0, done.stderr


def test_workers_send_traces_through_the_collector_to_jaeger() -> None:
    services = _compose()["services"]
    worker_env = services["memstream-worker"]["environment"]
    assert worker_env["MEMSTREAM_TRACING__ENABLED"].endswith(":-true}")
    endpoint = urlparse(worker_env["MEMSTREAM_TRACING__OTLP_ENDPOINT"])
    assert (endpoint.hostname, endpoint.path) == ("otel-collector", "/v1/traces")
    collector = services["otel-collector"]
    mounted = dict(v.split(":")[:2] for v in collector["volumes"])
    config = yaml.safe_load((ROOT / "deploy" / "otel-collector.yml").read_text())
    assert f"--config={mounted['./deploy/otel-collector.yml']}" in collector["command"]
    http = config["receivers"]["otlp"]["protocols"]["http"]["endpoint"]
    assert http.endswith(f":{endpoint.port}")
    assert str(endpoint.port) in collector["expose"]
    assert any(p.endswith(f":{endpoint.port}") for p in collector["ports"])  # applications
    pipeline = config["service"]["pipelines"]["traces"]
    assert pipeline["receivers"] == ["otlp"]
    exporter = config["exporters"][pipeline["exporters"][0]]
    host, port = exporter["endpoint"].split(":")
    assert host == "jaeger" and port in services["jaeger"]["expose"]
    assert any(p.endswith(":16686") for p in services["jaeger"]["ports"])  # the viewer
