"""DescribeConfigs (key 32), versions 1-4.

Version notes: v1 is the oldest served (config source and synonyms); v2 only marks throttling after the
response; v3 adds each config's type and, when asked, its documentation; v4 is flexible.

Resources: topics (type 2: every topic config kjbod honours, with TOPIC_CONFIG for overrides and otherwise
the broker's value: dynamic per-broker, dynamic cluster default, static or default, synonyms in Kafka's order)
and brokers (type 4: this node's id lists every broker config with its source, dynamic ones first; the empty
name lists the cluster-wide dynamic defaults only, as Kafka does), this broker's loggers (type 8, KIP-412:
each logger's level; kjbod.broker.broker_loggers) and client metrics subscriptions (type 16, KIP-714: the configs
set, with source CLIENT_METRICS_CONFIG; an unknown name has none). A null key list asks for
every config, a list for those keys (unknown keys are simply absent). Groups (type 32, KIP-848): the group
configs consumer.session.timeout.ms and consumer.heartbeat.interval.ms, GROUP_CONFIG (8) where the group
overrides them, else the broker's group.consumer.* value as DEFAULT_CONFIG; a group need not exist (Kafka's
answer), an empty name is INVALID_REQUEST. Errors per resource: an unknown topic is
UNKNOWN_TOPIC_OR_PARTITION, another broker's id or an unsupported resource type INVALID_REQUEST. Synonyms are
returned only when asked for (include_synonyms). See kjbod.broker.broker_config.
"""

from __future__ import annotations

from kjbod.broker import broker_config as bc
from kjbod.broker.authz import config_access_refusal
from kjbod.broker.broker_loggers import describe_loggers
from kjbod.broker.router import api
from kjbod.metadata.acls import DESCRIBE_CONFIGS
from kjbod.metadata.client_metrics import CLIENT_METRICS_CONFIG_SOURCE, CLIENT_METRICS_RESOURCE
from kjbod.protocol.errors import ErrorCode
from kjbod.protocol.generated import DescribeConfigsRequest, DescribeConfigsResponse
from kjbod.protocol.generated.describe_configs_response import DescribeConfigsResourceResult as Config
from kjbod.protocol.generated.describe_configs_response import DescribeConfigsResult as Result
from kjbod.protocol.generated.describe_configs_response import DescribeConfigsSynonym as Synonym

_CLIENT_METRICS_TYPES = {"metrics": bc.LIST, "interval.ms": bc.INT, "match": bc.LIST}


def _config(e: bc.Entry, synonyms: bool, documentation: bool) -> Config:
    return Config(name=e.name, value=e.value, read_only=e.read_only, config_source=e.source, is_sensitive=False,
                  synonyms=[Synonym(name=n, value=v, source=s) for n, v, s in e.synonyms] if synonyms else [],
                  config_type=e.type, documentation=e.doc if documentation else None)


@api(DescribeConfigsRequest)
def handle(node, request, body: DescribeConfigsRequest) -> DescribeConfigsResponse:
    results = []
    for r in body.resources:
        try:
            denied = config_access_refusal(node, request, r.resource_type, r.resource_name, DESCRIBE_CONFIGS)
            if denied:
                raise bc.ConfigProblem(*denied)
            if r.resource_type == bc.BROKER:
                entries = bc.describe_broker(node.config, node.dynamic_configs, r.resource_name,
                                             r.configuration_keys)
            elif r.resource_type == bc.TOPIC:
                topic = node.metadata.topic(r.resource_name)
                if topic is None:
                    raise bc.ConfigProblem(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                           f"topic {r.resource_name!r} does not exist")
                entries = bc.describe_topic(node.config, topic.configs, r.configuration_keys,
                                            node.dynamic_configs)
            elif r.resource_type == bc.BROKER_LOGGER:
                entries = describe_loggers(node.node_id, r.resource_name, r.configuration_keys)
            elif r.resource_type == bc.GROUP:
                if not r.resource_name:
                    raise bc.ConfigProblem(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
                entries = bc.describe_group(node.config, node.metadata.resource_configs(bc.GROUP, r.resource_name),
                                            r.configuration_keys)
            elif r.resource_type == CLIENT_METRICS_RESOURCE:
                if not r.resource_name:
                    raise bc.ConfigProblem(ErrorCode.INVALID_REQUEST,
                                           "Client metrics subscription name must not be empty")
                values = node.metadata.resource_configs(CLIENT_METRICS_RESOURCE, r.resource_name)
                results.append(Result(error_code=0, error_message=None, resource_type=r.resource_type,
                                      resource_name=r.resource_name, configs=[
                                          Config(name=k, value=v, read_only=False,
                                                 config_source=CLIENT_METRICS_CONFIG_SOURCE, is_sensitive=False,
                                                 synonyms=[], config_type=_CLIENT_METRICS_TYPES.get(k, bc.STRING),
                                                 documentation=None)
                                          for k, v in sorted(values.items())
                                          if r.configuration_keys is None or k in r.configuration_keys]))
                continue
            else:
                raise bc.ConfigProblem(ErrorCode.INVALID_REQUEST, f"resource type {r.resource_type} is not "
                                       "supported (kjbod serves topics (2), brokers (4), broker loggers (8), "
                                       "client metrics (16) and groups (32))")
        except bc.ConfigProblem as e:
            results.append(Result(error_code=e.code, error_message=e.message, resource_type=r.resource_type,
                                  resource_name=r.resource_name, configs=[]))
            continue
        results.append(Result(error_code=0, error_message=None, resource_type=r.resource_type,
                              resource_name=r.resource_name,
                              configs=[_config(e, body.include_synonyms, body.include_documentation)
                                       for e in entries]))
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)
