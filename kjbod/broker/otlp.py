"""A small reader of OpenTelemetry's OTLP MetricsData protobuf (opentelemetry-proto, metrics/v1), for the metrics
clients push with PushTelemetry (KIP-714).

Strategy: a protobuf wire-format walker (varint, 64-bit, length-delimited and 32-bit fields; unknown fields
skipped, as protobuf readers must) and, on top, the few messages needed to turn a payload into data points:

    MetricsData.resource_metrics(1) -> ResourceMetrics.resource(1).attributes(1) and .scope_metrics(2)
    ScopeMetrics.metrics(2) -> Metric: name(1), gauge(5), sum(7), histogram(9), summary(11)
    Gauge/Sum.data_points(1) -> NumberDataPoint: time_unix_nano(3, fixed64), as_double(4), as_int(6, sfixed64),
                                 attributes(7); Sum.aggregation_temporality(2), Sum.is_monotonic(3)
    Histogram.data_points(1) -> HistogramDataPoint: time(3), count(4, fixed64), sum(5, double), attributes(9)
    Summary.data_points(1) -> SummaryDataPoint: time(3), count(4, fixed64), sum(5, double), attributes(7)
    KeyValue: key(1), value(2) -> AnyValue: string(1), bool(2), int(3), double(4)

Anything malformed raises `OtlpError`; the caller answers the push INVALID_RECORD, as Kafka does when its
receiver plugin fails on a payload.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["DELTA", "CUMULATIVE", "OtlpError", "Point", "decode_metrics"]

DELTA, CUMULATIVE = 1, 2  # AggregationTemporality
GAUGE, SUM, HISTOGRAM, SUMMARY = "gauge", "sum", "histogram", "summary"
_D = struct.Struct("<d")
_Q = struct.Struct("<Q")
_q = struct.Struct("<q")
MAX_POINTS = 100_000  # more data points than this in one push is refused


class OtlpError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Point:
    """One data point: the metric's name and kind, its attributes, and its value (for histograms and summaries,
    `value` is the sum and `count` the count). `temporality` and `monotonic` are a Sum's."""

    name: str
    kind: str
    attributes: tuple[tuple[str, str], ...]
    value: float
    time_unix_nano: int = 0
    count: int = 0
    temporality: int = 0
    monotonic: bool = False


def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise OtlpError("truncated or overlong varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf: memoryview, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, object]]:
    """(field number, wire type, value): an int for varint and fixed fields, a memoryview for length-delimited."""
    pos = start
    end = len(buf) if end is None else end
    while pos < end:
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise OtlpError("field number 0")
        value: object
        if wire == 0:
            value, pos = _varint(buf, pos, end)
        elif wire == 1:
            if pos + 8 > end:
                raise OtlpError("truncated 64-bit field")
            (value,) = _Q.unpack_from(buf, pos)
            pos += 8
        elif wire == 2:
            length, pos = _varint(buf, pos, end)
            if pos + length > end:
                raise OtlpError("length-delimited field runs past its message")
            value = buf[pos:pos + length]
            pos += length
        elif wire == 5:
            if pos + 4 > end:
                raise OtlpError("truncated 32-bit field")
            value = int.from_bytes(buf[pos:pos + 4], "little")
            pos += 4
        else:
            raise OtlpError(f"unsupported wire type {wire}")
        yield number, wire, value


def _text(value: object) -> str:
    if not isinstance(value, memoryview):
        raise OtlpError("a string field is not length-delimited")
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        raise OtlpError("a string field is not UTF-8") from None


def _double(wire: int, value: object) -> float:
    if wire != 1 or not isinstance(value, int):
        raise OtlpError("a double field is not 64-bit")
    return float(_D.unpack(_Q.pack(value))[0])


def _any_value(buf: memoryview) -> str:
    for number, wire, value in _fields(buf):
        if number == 1:
            return _text(value)
        if number == 2 and wire == 0:
            return "true" if value else "false"
        if number == 3 and wire == 0:
            assert isinstance(value, int)
            return str(value - (1 << 64) if value >= 1 << 63 else value)
        if number == 4:
            return repr(_double(wire, value))
    return ""


def _key_value(buf: memoryview) -> tuple[str, str]:
    key = text = ""
    for number, _wire, value in _fields(buf):
        if number == 1:
            key = _text(value)
        elif number == 2 and isinstance(value, memoryview):
            text = _any_value(value)
    return key, text


def resource_attributes(buf: memoryview) -> tuple[tuple[str, str], ...]:
    return tuple(_key_value(v) for n, _w, v in _fields(buf) if n == 1 and isinstance(v, memoryview))


def _point(name: str, kind: str, buf: memoryview, temporality: int, monotonic: bool) -> Point:
    attrs: list[tuple[str, str]] = []
    value = 0.0
    count = 0
    when = 0
    attr_field = 9 if kind == HISTOGRAM else 7
    for number, wire, v in _fields(buf):
        if number == attr_field and isinstance(v, memoryview):
            attrs.append(_key_value(v))
        elif number == 3 and wire == 1:
            assert isinstance(v, int)
            when = v
        elif kind in (GAUGE, SUM):
            if number == 4:
                value = _double(wire, v)
            elif number == 6 and wire == 1:
                assert isinstance(v, int)
                value = float(_q.unpack(_Q.pack(v))[0])
        elif number == 4 and wire == 1:
            assert isinstance(v, int)
            count = v
        elif number == 5:
            value = _double(wire, v)
    return Point(name, kind, tuple(attrs), value, when, count, temporality, monotonic)


def _metric(buf: memoryview) -> Iterator[Point]:
    name = ""
    bodies: list[tuple[str, memoryview]] = []
    for number, _wire, value in _fields(buf):
        if number == 1:
            name = _text(value)
        elif isinstance(value, memoryview) and number in (5, 7, 9, 11):
            bodies.append(({5: GAUGE, 7: SUM, 9: HISTOGRAM, 11: SUMMARY}[number], value))
    for kind, body in bodies:
        points = []
        temporality = 0
        monotonic = False
        for number, wire, value in _fields(body):
            if number == 1 and isinstance(value, memoryview):
                points.append(value)
            elif number == 2 and wire == 0:
                assert isinstance(value, int)
                temporality = value
            elif number == 3 and wire == 0 and kind == SUM:
                monotonic = bool(value)
        for p in points:
            yield _point(name, kind, p, temporality, monotonic)


def decode_metrics(payload: bytes) -> tuple[tuple[tuple[str, str], ...], list[Point]]:
    """(the resource's attributes, every data point) of a MetricsData payload; OtlpError when it is malformed."""
    buf = memoryview(payload)
    resource: tuple[tuple[str, str], ...] = ()
    points: list[Point] = []
    for number, _wire, rm in _fields(buf):
        if number != 1 or not isinstance(rm, memoryview):
            continue
        for n2, _w2, part in _fields(rm):
            if not isinstance(part, memoryview):
                continue
            if n2 == 1:
                resource = resource_attributes(part)
            elif n2 == 2:
                for n3, _w3, metric in _fields(part):
                    if n3 == 2 and isinstance(metric, memoryview):
                        points.extend(_metric(metric))
                        if len(points) > MAX_POINTS:
                            raise OtlpError(f"more than {MAX_POINTS} data points")
    return resource, points
