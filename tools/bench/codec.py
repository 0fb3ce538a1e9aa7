"""Codec benchmark: DescribeLogDirsResponse v4, 4 dirs x 2,500 partitions over 50 topics (10,000 partitions).

kjbod's generated codec against kafka-python 3.x (pure Python, generated per-version functions) and kio (its
decoder is native Rust).  Targets (issue): encode >= 4x kafka-python; decode >= 1.5x kafka-python and no slower
than kio.  All three must produce the same bytes; the benchmark checks that before timing.
"""

from __future__ import annotations

from kjbod.protocol.generated import DescribeLogDirsResponse as R

from .common import heading, interleaved, median, paired_ratio, verdict

DIRS, TOPICS, PARTS = 4, 50, 50


def build_ours() -> R:
    P, T, D = R.DescribeLogDirsPartition, R.DescribeLogDirsTopic, R.DescribeLogDirsResult
    return R(results=[
        D(error_code=0, log_dir=f"/var/lib/kjbod/data-{d}", total_bytes=2 * 10**12 + d, usable_bytes=10**12 - 7 * d,
          topics=[T(name=f"topic-{t:03d}", partitions=[
              P(partition_index=p, partition_size=(d * 7919 + t * 104729 + p * 1299709) % 10**11,
                offset_lag=(p % 20 == 0) * 1234, is_future_key=(p % 20 == 0))
              for p in range(PARTS)]) for t in range(TOPICS)])
        for d in range(DIRS)])


def build_kafka_python(msg: R):
    from kafka.protocol.admin import DescribeLogDirsResponse as KR

    Res = KR.DescribeLogDirsResult
    Top = Res.DescribeLogDirsTopic
    Par = Top.DescribeLogDirsPartition
    return KR(version=4, throttle_time_ms=0, error_code=0, results=[
        Res(version=4, error_code=r.error_code, log_dir=r.log_dir, total_bytes=r.total_bytes,
            usable_bytes=r.usable_bytes, topics=[
                Top(version=4, name=t.name, partitions=[
                    Par(version=4, partition_index=p.partition_index, partition_size=p.partition_size,
                        offset_lag=p.offset_lag, is_future_key=p.is_future_key) for p in t.partitions])
                for t in r.topics]) for r in msg.results]), KR


def run(rounds: int = 7) -> dict:
    import io

    from kio.schema.describe_log_dirs.v4 import response as kio_resp
    from kio.serial import entity_reader, entity_writer

    heading("Codec: DescribeLogDirsResponse v4, 4 dirs x 2,500 partitions (10,000), 50 topics")
    ours = build_ours()
    wire = ours.encode(4)
    kp_obj, KR = build_kafka_python(ours)
    kp_wire = kp_obj.encode(version=4)
    kio_read = entity_reader(kio_resp.DescribeLogDirsResponse)
    kio_write = entity_writer(kio_resp.DescribeLogDirsResponse)
    kio_obj, _ = kio_read(wire, 0)
    buf = io.BytesIO()
    kio_write(buf, kio_obj)
    same = kp_wire == wire and buf.getvalue() == wire and R.decode(wire, 4) == ours
    print(f"   wire size {len(wire):,} bytes; kjbod, kafka-python and kio encodings identical: {same}")
    if not same:
        raise SystemExit("codec bench: implementations disagree on the bytes; refusing to time them")

    def kio_encode():
        b = io.BytesIO()
        kio_write(b, kio_obj)
        return b.getvalue()

    enc = interleaved({
        "kjbod": lambda: ours.encode(4),
        "kafka-python": lambda: kp_obj.encode(version=4),
        "kio": kio_encode,
    }, rounds)
    dec = interleaved({
        "kjbod": lambda: R.decode(wire, 4),
        "kafka-python": lambda: KR.decode(wire, version=4),
        "kio": lambda: kio_read(wire, 0),
    }, rounds)
    enc_vs_kp = paired_ratio(enc["kafka-python"], enc["kjbod"])
    enc_vs_kio = paired_ratio(enc["kio"], enc["kjbod"])
    dec_vs_kp = paired_ratio(dec["kafka-python"], dec["kjbod"])
    dec_vs_kio = paired_ratio(dec["kio"], dec["kjbod"])
    for label, s in (("encode", enc), ("decode", dec)):
        print(f"   {label}: " + ", ".join(f"{k} {median(v) * 1000:.2f} ms" for k, v in s.items()))
    print(f"   encode: kjbod is {enc_vs_kp:.2f}x kafka-python's speed (target >= 4x: {verdict(enc_vs_kp >= 4)}), "
          f"{enc_vs_kio:.2f}x kio's")
    print(f"   decode: kjbod is {dec_vs_kp:.2f}x kafka-python's speed (target >= 1.5x: {verdict(dec_vs_kp >= 1.5)}), "
          f"{dec_vs_kio:.2f}x kio's native decoder (target >= 1.0x: {verdict(dec_vs_kio >= 1.0)})")
    return {"encode_vs_kafka_python": enc_vs_kp, "decode_vs_kafka_python": dec_vs_kp, "decode_vs_kio": dec_vs_kio}


if __name__ == "__main__":
    run()
