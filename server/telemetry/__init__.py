"""Structured logs, Prometheus metrics and OpenTelemetry traces, used by every layer."""
