"""Golden bytes from real clients: record what Kafka clients send to kjbod and what kjbod answers.

    python -m tools.make_golden record [--out-dir tests/golden]          # start kjbod + relay, run the clients
    python -m tools.make_golden convert CAPTURE.jsonl --client NAME --out FILE.json

Strategy: `record` formats and starts a real `kjbod serve` in a temporary directory whose
`advertised.listeners` points at a capture relay (tools/capture_relay.py), so a client's bootstrap connection
*and* the connection it opens to the broker the metadata names both pass through the relay.  Each client
(kafka-python's KafkaAdminClient: bootstrap, describe_cluster, list_topics; confluent-kafka's AdminClient:
list_topics) gets a fresh relay and so its own capture.  `convert` turns a capture (one JSON line per frame)
into a golden file: every frame as hex with, next to it, what it is (api, version, correlation id, header
version) and a short rendering of the decoded message, so a reader can check a golden file by eye and
tests/test_golden.py can check kjbod's codec against it both ways.

Responses are matched to their request by (connection, correlation id): only the request says which API and
version a response body is encoded with.  Bytes after a request body are kept as `trailing_hex` (librdkafka's
Metadata v13 requests carry three that Apache Kafka ignores, and so does kjbod).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from kjbod.protocol.generated.registry import APIS
from kjbod.protocol.generated.response_header import ResponseHeader
from kjbod.protocol.headers import (
    decode_request_header,
    peek_api,
    request_header_version,
    response_header_version,
)

__all__ = ["build_golden", "decode_request", "decode_response", "load_capture", "record", "render"]

ROOT = Path(__file__).resolve().parents[1]
GOLDEN_DIR = ROOT / "tests" / "golden"
CLIENT_ID = "kjbod-golden"
RENDER_LIMIT = 400

# ----------------------------------------------------------------------------------------------- decoding


def decode_request(frame: bytes) -> dict[str, Any]:
    """A request frame (size prefix removed) -> its header, body and the bytes left after the body."""
    key, version, _corr = peek_api(frame)
    info = APIS[key]
    header, pos = decode_request_header(frame, key, version)
    body, end = info.request.decode_from(frame, pos, version)
    return {"api_key": key, "api": info.name, "version": version, "header_version":
            request_header_version(key, version), "header": header, "body": body, "trailing": bytes(frame[end:])}


def decode_response(frame: bytes, api_key: int, version: int) -> dict[str, Any]:
    """A response frame, read with the api and version of the request it answers (ApiVersions: header v0)."""
    header_version = response_header_version(api_key, version)
    header, pos = ResponseHeader.decode_from(frame, 0, header_version)
    body = APIS[api_key].response.decode(frame[pos:], version)
    return {"header_version": header_version, "header": header, "body": body}


# ---------------------------------------------------------------------------------------------- rendering


def _render(value: Any) -> str:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        parts = []
        for i, f in enumerate(dataclasses.fields(value)):
            v = getattr(value, f.name)
            if f.name == "unknown_tagged_fields" and not v:
                continue
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            # Defaults are noise, except a struct's first field (its key: api_key 0 is Produce) and error codes.
            if v == default and i > 0 and f.name != "error_code":
                continue
            parts.append(f"{f.name}={_render(v)}")
        return "{" + ", ".join(parts) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_render(v) for v in value) + "]"
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(value)} bytes>"
    if isinstance(value, uuid.UUID):
        return str(value)
    return repr(value)


def render(msg: Any) -> str:
    """A short, stable, readable rendering of a decoded message: fields that differ from their defaults, plus
    each struct's first field and error codes."""
    text = type(msg).__name__ + _render(msg)
    return text if len(text) <= RENDER_LIMIT else text[:RENDER_LIMIT - 3] + "..."


# ------------------------------------------------------------------------------------------- golden files


def load_capture(path: Path) -> list[dict[str, Any]]:
    """The capture relay's JSON lines: [{"conn", "dir", "hex"}, ...] in recording order."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def build_golden(records: list[dict[str, Any]], *, client: str, meta: dict[str, Any] | None = None
                 ) -> dict[str, Any]:
    """Capture records -> a golden document: each frame with its hex and a readable expectation."""
    pending: dict[tuple[int, int], tuple[int, int]] = {}  # (conn, correlation id) -> (api key, version)
    frames = []
    # The relay numbers every accepted connection, readiness probes included: renumber from 0 by first frame.
    conns: dict[int, int] = {}
    for rec in records:
        frame = bytes.fromhex(rec["hex"])
        conn = conns.setdefault(rec["conn"], len(conns))
        out: dict[str, Any] = {"conn": conn, "dir": rec["dir"]}
        if rec["dir"] == "request":
            d = decode_request(frame)
            corr = d["header"].correlation_id
            pending[(conn, corr)] = (d["api_key"], d["version"])
            out.update(api=d["api"], api_key=d["api_key"], version=d["version"], correlation_id=corr,
                       header_version=d["header_version"], client_id=d["header"].client_id)
            if d["trailing"]:
                out["trailing_hex"] = d["trailing"].hex()
        else:
            corr = int.from_bytes(frame[:4], "big", signed=True)  # every response header starts with it
            key, version = pending.pop((conn, corr))
            d = decode_response(frame, key, version)
            out.update(api=APIS[key].name, api_key=key, version=version, correlation_id=corr,
                       header_version=d["header_version"])
        out["message"] = render(d["body"])
        out["hex"] = rec["hex"]
        frames.append(out)
    if pending:
        raise ValueError(f"requests without a response in the capture: {sorted(pending)}")
    return {"client": client, **(meta or {}), "frames": frames}


def write_golden(doc: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------------------------- recording


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc: subprocess.Popen, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout:g}s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _run_kafka_python(bootstrap: str) -> dict[str, Any]:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=CLIENT_ID)
    try:
        cluster = admin.describe_cluster()
        topics = admin.list_topics()
    finally:
        admin.close()
    import kafka

    return {"client_version": kafka.__version__, "result": {"describe_cluster": cluster, "list_topics": topics}}


def _run_confluent(bootstrap: str) -> dict[str, Any]:
    import confluent_kafka
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": CLIENT_ID})
    md = admin.list_topics(timeout=10)
    del admin  # librdkafka closes its connections when the handle goes
    return {"client_version": f"{confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]})",
            "result": {"cluster_id": md.cluster_id, "brokers": {str(k): str(v) for k, v in md.brokers.items()}}}


CLIENTS = {"kafka-python": _run_kafka_python, "confluent-kafka": _run_confluent}


def record(out_dir: Path = GOLDEN_DIR, clients: list[str] | None = None, cluster_id: str | None = None) -> list[Path]:
    """Start kjbod behind a capture relay, run each client against it, write one golden file per client."""
    written = []
    work = Path(tempfile.mkdtemp(prefix="kjbod-golden-"))
    server = None
    try:
        port, controller_port, relay_port = _free_port(), _free_port(), _free_port()
        config = work / "server.properties"
        config.write_text("\n".join([
            "node.id=1", "process.roles=broker,controller",
            f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{relay_port}",
            "controller.listener.names=CONTROLLER",
            f"log.dirs={work / 'logs-0'},{work / 'logs-1'}", f"metadata.log.dir={work / 'metadata'}", ""]))
        kjbod = [sys.executable, "-m", "kjbod"]
        fmt = [*kjbod, "format", "-c", str(config)] + (["--cluster-id", cluster_id] if cluster_id else [])
        subprocess.run(fmt, check=True, capture_output=True, cwd=ROOT)
        meta = dict(line.split("=", 1) for line in (work / "logs-0" / "meta.properties").read_text().splitlines()
                    if "=" in line and not line.startswith("#"))
        server = subprocess.Popen([*kjbod, "serve", "-c", str(config), "--log-level", "warning"], cwd=ROOT,
                                  stdout=subprocess.DEVNULL, stderr=(work / "server.log").open("wb"))
        _wait_listening(port, server, "kjbod serve")
        for name in clients or list(CLIENTS):
            capture = work / f"{name}.jsonl"
            relay = subprocess.Popen(
                [sys.executable, "-m", "tools.capture_relay", "--listen", f"127.0.0.1:{relay_port}",
                 "--upstream", f"127.0.0.1:{port}", "--out", str(capture)],
                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                _wait_listening(relay_port, relay, "capture relay")
                # The readiness probe opened (and closed) a connection without frames: it leaves no record.
                outcome = CLIENTS[name](f"127.0.0.1:{relay_port}")
                time.sleep(0.5)  # let the relay write the last responses
            finally:
                _stop(relay)
            doc = build_golden(load_capture(capture), client=name, meta={
                "client_version": outcome["client_version"],
                "recorded_with": "python -m tools.make_golden record",
                "cluster_id": meta["cluster.id"], "node_id": 1, "advertised_port": relay_port,
                "client_result": json.loads(json.dumps(outcome["result"], default=str)),
            })
            path = out_dir / f"{name}.json"
            write_golden(doc, path)
            written.append(path)
    finally:
        if server is not None:
            _stop(server)
        shutil.rmtree(work, ignore_errors=True)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.make_golden", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="record every client against a fresh kjbod and write golden files")
    rec.add_argument("--out-dir", type=Path, default=GOLDEN_DIR)
    rec.add_argument("--client", action="append", choices=sorted(CLIENTS))
    rec.add_argument("--cluster-id")
    conv = sub.add_parser("convert", help="turn one capture into a golden file")
    conv.add_argument("capture", type=Path)
    conv.add_argument("--client", required=True)
    conv.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.command == "record":
        for path in record(args.out_dir, args.client, args.cluster_id):
            sys.stderr.write(f"wrote {path}\n")
    else:
        write_golden(build_golden(load_capture(args.capture), client=args.client), args.out)
        sys.stderr.write(f"wrote {args.out}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
