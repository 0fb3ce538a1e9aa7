"""Scraping a live node's /metrics in tests: the samples as a dict, parsed by prometheus_client's text parser."""

from __future__ import annotations

import http.client
import time
from collections.abc import Callable, Mapping

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def get(port: int, path: str = "/metrics", accept: str | None = None) -> tuple[int, str, str]:
    """(status, content type, body) of one GET."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers={"Accept": accept} if accept else {})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type", ""), resp.read().decode()
    finally:
        conn.close()


def scrape(port: int) -> Samples:
    status, _type, body = get(port)
    assert status == 200, body
    out: Samples = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    assert key in samples, f"{name}{labels} not scraped; scraped {sorted(n for n, _ in samples if n == name)[:5]}"
    return samples[key]


def labelled(samples: Samples, name: str) -> list[dict[str, str]]:
    """The label sets `name` was scraped with."""
    return [dict(labels) for n, labels in samples if n == name]


def wait_for(port: int, check: Callable[[Samples], bool], what: str, timeout: float = 60.0) -> Samples:
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(port)
        if check(samples):
            return samples
        assert time.monotonic() < deadline, f"{what}: not seen within {timeout} s"
        time.sleep(0.2)


def request_counts(samples: Samples) -> Mapping[str, float]:
    """RequestsPerSec summed over versions, per request name."""
    out: dict[str, float] = {}
    for (name, labels), v in samples.items():
        if name == "kafka_network_requestmetrics_requests_total":
            request = dict(labels)["request"]
            out[request] = out.get(request, 0) + v
    return out
