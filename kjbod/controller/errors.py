"""Whole-request error responses for the controller's APIs: kjbod.protocol.error_responses, which brokers use too
(authorization failures)."""

from kjbod.protocol.error_responses import error_response

__all__ = ["error_response"]
