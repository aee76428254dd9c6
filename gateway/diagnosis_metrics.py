"""The gateway's metric instruments: diagnoses by outcome, and the latency of each downstream hop.

Instruments come from the meter provider passed in (never a module global), so a test can read
them through its own reader and each process exports under its own `service.name`.
"""

from __future__ import annotations

from opentelemetry.metrics import MeterProvider

DIAGNOSES = "attest.diagnoses"
HOP_DURATION = "attest.hop.duration"

# Sub-second hops dominate (local gRPC, deterministic roles); model-backed roles take seconds.
_HOP_BUCKETS_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class DiagnosisMetrics:
    def __init__(self, meter_provider: MeterProvider) -> None:
        meter = meter_provider.get_meter("attest.gateway")
        self._diagnoses = meter.create_counter(
            DIAGNOSES, unit="{diagnosis}",
            description="Finished diagnoses by effective verdict, fallback type, mode and status",
        )
        self._hop_duration = meter.create_histogram(
            HOP_DURATION, unit="s",
            description="Duration of each downstream gRPC call made by the gateway",
            explicit_bucket_boundaries_advisory=_HOP_BUCKETS_SECONDS,
        )

    def diagnosis_finished(self, *, status: str, mode: str, effective_verdict: str | None,
                           fallback_type: str | None) -> None:
        # "NONE" rather than a missing key: a dashboard can then group every diagnosis by each
        # attribute without special-casing absent values.
        self._diagnoses.add(1, {
            "effective_verdict": effective_verdict or "NONE",
            "fallback_type": fallback_type or "NONE",
            "mode": mode,
            "status": status,
        })

    def hop_finished(self, node: str, grpc_status: str, seconds: float) -> None:
        self._hop_duration.record(seconds, {"node": node, "grpc_status": grpc_status})
