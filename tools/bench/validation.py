"""Record validation benchmark: what checking every record of every produced batch costs on the Produce path.

* **Produce with and without validation**: two `kjbod serve` processes, identical but for
  KJBOD_BENCH_SKIP_RECORD_VALIDATION=1 in the environment of one (a switch used only here: that server appends
  exactly as kjbod did before record validation), take the same pipelined Produce load (one batch of ~1 MiB of
  records per request, acks=1, 8 in flight) round by round, interleaved: 1 KiB and 100-byte records,
  uncompressed (random bytes) and lz4 (JSON-like events, about half the size as sent).  The figure is the
  median over rounds of (throughput with validation) / (throughput without).  Target: >= 85 % for uncompressed
  1 KiB records.
* **Decompression**: in this process, validate_records on one 1 MiB (uncompressed) batch per codec against the
  codec library's own one-shot decompress of the same payload, interleaved; the ratio is library time over
  validation time (1.0 = validation decompresses and walks the records at the library's own speed).  Snappy has
  no library here: kjbod's own reader is timed alone.

`python -m tools.bench.validation [--quick]`; `run()` returns the ratios.
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from kjbod.storage.records import iter_records

from .common import heading, interleaved, median, verdict, warm_memory
from .datapath import (
    MIB,
    BenchServer,
    create_topic,
    exact_batch,
    process_cpu,
    produce_frame,
    produce_pipelined,
)

TARGET = 0.85
DEPTH = 8


def event_values(records: int, size: int) -> list[bytes]:
    """`records` JSON-like events of `size` bytes: field names repeat, the values are random, so they compress
    as logs and events do (lz4 about 2-3x, zstd and gzip more)."""
    rng = random.Random(11)
    out = []
    for i in range(records):
        fields = [f'"user":{rng.randrange(10**9)}', f'"session":"{rng.randbytes(8).hex()}"', f'"seq":{i}',
                  f'"page":"/catalog/{rng.choice(["shoes", "hats", "bags", "coats"])}/{rng.randrange(10**6)}"']
        text = ("{" + ",".join(fields) + ',"tags":[').encode()
        while len(text) < size - 2:
            text += f'"t{rng.randrange(100)}",'.encode()
        out.append(text[: size - 2] + b"]}")
    return out


def lz4_batch(records: int) -> bytes:
    """About 1 MiB of events before compression."""
    from kjbod.storage.records import CODEC_LZ4, build_batch

    now = int(time.time() * 1000)
    return build_batch([(None, v, [], now) for v in event_values(records, MIB // records - 8)],
                       compression=CODEC_LZ4)


def workloads() -> dict[str, bytes]:
    return {
        "1 KiB records, uncompressed": exact_batch(MIB, 1024),
        "100-byte records, uncompressed": exact_batch(MIB, 9600),
        "1 KiB records, lz4": lz4_batch(1024),
        "100-byte records, lz4": lz4_batch(9600),
    }


def bench_produce(work: Path, rounds: int, mib_per_round: int) -> dict:
    heading(f"Produce with and without record validation: one batch of ~1 MiB of records per request, acks=1, "
            f"{DEPTH} in flight, "
            f"{mib_per_round} requests per round and workload, {rounds} rounds")
    servers = {
        "validated": BenchServer(work / "validated").start(),
        "unvalidated": BenchServer(work / "unvalidated", env={"KJBOD_BENCH_SKIP_RECORD_VALIDATION": "1"}).start(),
    }
    out: dict = {}
    try:
        frames = {}
        records_size = {}
        for name, batch in workloads().items():
            frames[name] = (len(batch), produce_frame("produce", 0, batch))
            records_size[name] = sum(len(r.value or b"") for r in iter_records(batch))
        for server in servers.values():
            create_topic(server.port, "produce", 1)
            for _size, frame in frames.values():  # warm-up: connection, first segment, page cache
                produce_pipelined(server.port, frame, 8, DEPTH)
        warm_memory(2 * rounds * len(frames) * mib_per_round * MIB + 512 * MIB)
        times: dict[tuple[str, str], list[float]] = {(w, s): [] for w in frames for s in servers}
        cpu = dict.fromkeys(servers, 0.0)
        for _ in range(rounds):
            for workload, (_size, frame) in frames.items():
                for kind, server in servers.items():
                    assert server.process is not None
                    os.sync()  # each run starts without dirty pages (see datapath.bench_produce)
                    c0 = process_cpu(server.process.pid)
                    times[(workload, kind)].append(produce_pipelined(server.port, frame, mib_per_round, DEPTH))
                    cpu[kind] += process_cpu(server.process.pid) - c0
    finally:
        for server in servers.values():
            server.stop()
    for workload, (size, _frame) in frames.items():
        on, off = times[(workload, "validated")], times[(workload, "unvalidated")]
        ratio = median([u / v for v, u in zip(on, off, strict=True)])
        mb = size * mib_per_round / 1e6
        values = records_size[workload] * mib_per_round / 1e6
        print(f"   {workload:32s} validated {mb / median(on):7,.0f} MB/s, unvalidated {mb / median(off):7,.0f} MB/s "
              f"as sent (batches of {size / 1e6:.2f} MB; record values validated {values / median(on):,.0f} "
              f"MB/s): {ratio:.1%}")
        key = workload.replace("-byte", "b").replace(" KiB", "kib").replace(",", "").replace(" ", "_").lower()
        out[f"validation_produce_{key}"] = ratio
    print(f"   server CPU seconds, all runs: validated {cpu['validated']:.1f}, unvalidated {cpu['unvalidated']:.1f}")
    target = out["validation_produce_1kib_records_uncompressed"]
    print(f"   with validation, uncompressed 1 KiB records reach {target:.1%} of the throughput without it "
          f"(target >= {TARGET:.0%}: {verdict(target >= TARGET)})")
    return out


def bench_decompression(rounds: int) -> dict:
    import lz4.frame
    import zstandard

    from kjbod.storage import records as R

    R.keep_freed_buffers()  # as `kjbod serve` does
    heading("Validation of one compressed batch (decompress + record walk) against the codec library's own "
            "decompress of the same payload")
    now = int(time.time() * 1000)
    specs = [(None, v, [], now) for v in event_values(1024, 1000)]  # ~1 MiB before compression
    libraries = {
        "gzip": (R.CODEC_GZIP, gzip.decompress),
        "lz4": (R.CODEC_LZ4, lz4.frame.decompress),
        "zstd": (R.CODEC_ZSTD, lambda data: zstandard.ZstdDecompressor().decompress(data)),
    }
    out: dict = {}
    for name, (codec, library) in libraries.items():
        batch = R.build_batch(specs, compression=codec)
        [(pos, header)] = R.validate_batches(batch, max_message_bytes=1 << 30)
        payload = batch[R.RECORD_BATCH_OVERHEAD:]
        raw_size = len(library(payload))
        samples = interleaved({
            "library": lambda library=library, payload=payload: library(payload),
            "validation": lambda batch=batch, pos=pos, header=header: R.validate_records(
                batch, [(pos, header)], now_ms=now),
        }, rounds=rounds)
        ratio = median([lib / val for lib, val in zip(samples["library"], samples["validation"], strict=True)])
        print(f"   {name:5s} library {raw_size / median(samples['library']) / 1e6:7,.0f} MB/s, validation "
              f"{raw_size / median(samples['validation']) / 1e6:7,.0f} MB/s (uncompressed bytes): {ratio:.1%} of the "
              "library's speed")
        out[f"validation_decompress_{name}_vs_library"] = ratio
    batch = R.build_batch(specs, compression=R.CODEC_SNAPPY)
    found = R.validate_batches(batch, max_message_bytes=1 << 30)
    seconds = median(interleaved({"snappy": lambda: R.validate_records(batch, found, now_ms=now)},
                                 rounds=rounds)["snappy"])
    print(f"   snappy (kjbod's own C reader, no library installed; literal-only data): "
          f"{len(batch) / seconds / 1e6:,.0f} MB/s")
    return out


def run(rounds: int = 7, quick: bool = False) -> dict:
    base = os.environ.get("KJBOD_BENCH_DIR") or None
    work = Path(tempfile.mkdtemp(prefix="kjbod-bench-validation-", dir=base))
    try:
        out = bench_decompression(3 if quick else rounds)
        out.update(bench_produce(work, 3 if quick else rounds, 16 if quick else 64))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.validation")
    parser.add_argument("--quick", action="store_true", help="fewer rounds and requests, for a smoke run")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    run(args.rounds, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
