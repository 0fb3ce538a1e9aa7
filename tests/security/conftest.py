"""Fixtures for the TLS tests: a throwaway certificate authority made with the `openssl` command, and kjbod nodes
whose listeners are TLS.

`certs` (one per test session) holds, as PEM files: a CA, a server certificate for localhost and 127.0.0.1 signed by
it (with its key in a Kafka-style PEM key store: key and chain in one file, and an encrypted copy of the key), a
client certificate signed by the same CA (mutual TLS), and a client certificate from another CA that nothing trusts.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from live import LiveServer, format_storage, free_port, new_cluster_id

KEY_PASSWORD = "kjbod-key-secret"


@dataclass(frozen=True)
class Certs:
    directory: Path
    ca: Path  # the CA certificate: what clients and the broker trust
    server_cert: Path
    server_key: Path
    server_keystore: Path  # key + chain, one PEM file (ssl.keystore.location with ssl.keystore.type=PEM)
    server_keystore_encrypted: Path  # the same with the key encrypted by KEY_PASSWORD
    client_cert: Path
    client_key: Path
    rogue_cert: Path  # signed by a CA nobody trusts
    rogue_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed:\n{done.stderr}")


def _ca(cwd: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}", cwd=cwd)


def _signed(cwd: Path, name: str, ca: str, cn: str, ext: str) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=cwd)
    (cwd / f"{name}.ext").write_text(ext)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=cwd)


def make_certs(directory: Path) -> Certs:
    directory.mkdir(parents=True, exist_ok=True)
    _ca(directory, "ca")
    _ca(directory, "rogue-ca")
    _signed(directory, "server", "ca", "localhost",
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
    _signed(directory, "client", "ca", "kjbod-test-client", "extendedKeyUsage=clientAuth\n")
    _signed(directory, "rogue", "rogue-ca", "rogue-client", "extendedKeyUsage=clientAuth\n")
    keystore = directory / "server-keystore.pem"
    keystore.write_text((directory / "server.key").read_text() + (directory / "server.pem").read_text())
    _openssl("pkcs8", "-topk8", "-in", "server.key", "-out", "server-encrypted.key", "-passout",
             f"pass:{KEY_PASSWORD}", "-v2", "aes-256-cbc", cwd=directory)
    encrypted = directory / "server-keystore-encrypted.pem"
    encrypted.write_text((directory / "server-encrypted.key").read_text() + (directory / "server.pem").read_text())
    return Certs(directory, directory / "ca.pem", directory / "server.pem", directory / "server.key", keystore,
                 encrypted, directory / "client.pem", directory / "client.key", directory / "rogue.pem",
                 directory / "rogue.key")


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls-certs"))


def tls_settings(certs: Certs, prefix: str = "", *, client_auth: str | None = None) -> dict[str, str]:
    """The ssl.* keys of a TLS listener with the server certificate, trusting the test CA."""
    out = {
        f"{prefix}ssl.keystore.type": "PEM",
        f"{prefix}ssl.keystore.location": str(certs.server_keystore),
        f"{prefix}ssl.truststore.type": "PEM",
        f"{prefix}ssl.truststore.location": str(certs.ca),
    }
    if client_auth is not None:
        out[f"{prefix}ssl.client.auth"] = client_auth
    return out


def start_tls_node(directory: Path, *, listeners: str, overrides: Mapping[str, str], broker_port: int,
                   controller_port: int, log_dir_count: int = 2) -> LiveServer:
    """A combined node with the given `listeners` (whose ports the caller chose), formatted and started."""
    directory.mkdir(parents=True, exist_ok=True)
    log_dirs = [directory / f"logs-{i}" for i in range(log_dir_count)]
    server = LiveServer(node_id=1, cluster_id=new_cluster_id(), port=broker_port, controller_port=controller_port,
                        directory=directory, config=directory / "server.properties", log_dirs=log_dirs,
                        metadata_dir=directory / "metadata", stderr_path=directory / "stderr.log")
    settings = {
        "node.id": "1",
        "process.roles": "broker,controller",
        "listeners": listeners,
        "controller.listener.names": "CONTROLLER",
        "log.dirs": ",".join(str(d) for d in log_dirs),
        "metadata.log.dir": str(server.metadata_dir),
        **overrides,
    }
    server.config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    format_storage(server.config, server.cluster_id)
    server.start()
    return server


__all__ = ["KEY_PASSWORD", "Certs", "certs", "free_port", "make_certs", "start_tls_node", "tls_settings"]
