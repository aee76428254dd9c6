"""Attest runtime library: config, telemetry, gRPC server/client helpers, persistence, domain models."""
