"""No run is left RUNNING: heartbeats, the reaper, the drain at shutdown and the audit store's health.

- Each run carries the instance id of the gateway process running it; the `RunKeeper` stamps
  the heartbeat of its live runs every beat.
- Any replica reaps: a RUNNING run whose heartbeat is older than the reap bound lost its gateway,
  and is ended FALLBACK `RUN_INTERRUPTED` (retryable) with the fixed text, the reason in
  `verifier_evaluation.failure_reason`, a terminal FALLBACK event closing its log and its
  PROJECTING invocations closed as ERROR (`RunStore.interrupt_run`, a conditional UPDATE: of
  several replicas exactly one ends a run). At start-up and on every beat.
- A run whose RPC ended without a terminal write (the store failed under it) is ended the same
  way as soon as the store takes writes again.
- Graceful shutdown (`drain`): no new run starts; the runs in flight get the grace period to
  finish, then are stopped and end RUN_INTERRUPTED; any left RUNNING are ended in the store.
- A write refused for want of space, or by a read-only store, makes `readiness_check` fail (the
  gateway is NOT_SERVING) until a probe write succeeds again.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from gateway import progress_events as events
from gateway.progress_events import PROGRESS_KEY, stored_form
from shared.core.contracts import ComposerInput
from shared.core.structured_answer import retryable
from shared.core.templates import compose_answer
from shared.db.models import utcnow
from shared.db.run_store import RunStore
from shared.db.write_failures import unwritable_reason

log = logging.getLogger(__name__)

INTERRUPTED = "RUN_INTERRUPTED"
# The edge of the terminal event of an interrupted run.
EDGE_INTERRUPTED = "run_interrupted"
STOPPED_REASON = "the gateway stopped before the run finished"
# Graphs told to stop at shutdown get this long to write their own outcome.
INTERRUPT_WAIT_SECONDS = 3.0


def new_instance_id() -> str:
    """Unique per gateway process, and says which host and process it was."""
    return f"{socket.gethostname()[:32]}-{os.getpid()}-{secrets.token_hex(4)}"


class RunKeeper:
    def __init__(self, runs: RunStore, *, reap_after_seconds: float, heartbeat_seconds: float,
                 instance_id: str | None = None, clock: Callable[[], datetime] = utcnow) -> None:
        self._runs = runs
        self.instance_id = instance_id or new_instance_id()
        self._reap_after = timedelta(seconds=reap_after_seconds)
        # A run's heartbeat must be renewed well within the bound, whatever the settings say.
        self._interval = min(heartbeat_seconds, reap_after_seconds / 3)
        self._clock = clock
        self._lock = threading.Lock()
        self._live: dict[str, str] = {}  # run id -> its query
        self._orphans: dict[str, str] = {}  # runs whose RPC ended without a terminal write
        self._store_problem: str | None = None
        self.stopping = threading.Event()  # no new run starts
        self.interrupting = threading.Event()  # runs in flight stop now
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        # Called when the store's health changes (the readiness monitor's check_now).
        self.on_store_change: Callable[[], Any] | None = None

    # -- the runs of this process --------------------------------------------------------------

    def started(self, run_id: str, query: str) -> None:
        with self._lock:
            self._live[run_id] = query

    def ended(self, run_id: str, finished: bool) -> None:
        """The run's RPC is over; `finished`: its outcome was written. If not, it is ended
        RUN_INTERRUPTED now, or as soon as the store takes writes."""
        with self._lock:
            query = self._live.pop(run_id, "")
            if not finished:
                self._orphans[run_id] = query
        if not finished:
            self._end_orphans()

    def live_runs(self) -> int:
        with self._lock:
            return len(self._live)

    def is_active(self, context_active: Callable[[], bool]) -> Callable[[], bool]:
        """The run's is_active: the caller still waits and the gateway is not stopping it."""
        return lambda: context_active() and not self.interrupting.is_set()

    # -- the audit store's health --------------------------------------------------------------

    def store_failed(self, exc: BaseException) -> str | None:
        """Note a failed write; the reason when it says the store refuses writes (then the gateway
        is NOT_SERVING until a probe write succeeds), None for any other failure."""
        reason = unwritable_reason(exc)
        if reason is not None:
            self._set_store_problem(f"{reason}: {str(exc).splitlines()[0][:200]}")
        return reason

    def readiness_check(self) -> str | None:
        return self._store_problem

    def _set_store_problem(self, problem: str | None) -> None:
        changed = (problem is None) != (self._store_problem is None)
        self._store_problem = problem
        if changed:
            if problem is None:
                log.info("the audit store takes writes again")
            else:
                log.error("the audit store refuses writes, the gateway is NOT_SERVING: %s", problem)
            if self.on_store_change is not None:
                self.on_store_change()

    # -- the beat ------------------------------------------------------------------------------

    def start(self) -> None:
        """Reap once now (runs a previous process left), then beat on a daemon thread."""
        self.tick()
        self._thread = threading.Thread(target=self._loop, name="run-keeper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def _loop(self) -> None:
        while not self._stopped.wait(self._interval):
            self.tick()

    def tick(self) -> None:
        """One beat: probe a failed store, stamp the live runs, end orphans, reap stale runs."""
        try:
            if self._store_problem is not None:
                self._runs.probe_write()
                self._set_store_problem(None)
            with self._lock:
                live = list(self._live)
            self._runs.beat(live)
            self._end_orphans()
            self.reap()
        except Exception as exc:  # the keeper must outlive any failure: report and beat again
            if self.store_failed(exc) is None:
                log.exception("run keeper: beat failed")

    def reap(self) -> int:
        """End the RUNNING runs whose heartbeat is older than the bound; how many this replica ended."""
        now = self._clock()
        cutoff = now - self._reap_after
        ended = 0
        for run in self._runs.stale_runs(cutoff):
            reason = (f"the run's gateway ({run['gateway_instance'] or 'unknown'}) stopped: no heartbeat since "
                      f"{run['heartbeat_at'] or 'its start'} (bound {self._reap_after.total_seconds():g} s)")
            if self.interrupt(run["run_id"], run["query"], reason, stale_before=cutoff):
                ended += 1
                log.warning("reaped run %s: %s", run["run_id"], reason, extra={"run_id": run["run_id"]})
        return ended

    def _end_orphans(self) -> None:
        with self._lock:
            orphans = dict(self._orphans)
        for run_id, query in orphans.items():
            try:
                self.interrupt(run_id, query, "the run's request ended before its outcome could be written",
                               gateway_instance=self.instance_id)
            except Exception as exc:
                if self.store_failed(exc) is None:
                    log.exception("could not end run %s", run_id, extra={"run_id": run_id})
                continue
            with self._lock:
                self._orphans.pop(run_id, None)

    def interrupt(self, run_id: str, query: str, reason: str, *, stale_before: datetime | None = None,
                  gateway_instance: str | None = None) -> bool:
        """End the run RUN_INTERRUPTED if it is still RUNNING (and stale, or this gateway's)."""
        composed = compose_answer(ComposerInput(query=query, fallback_type=INTERRUPTED, fallback_reason=reason))
        channels: dict[str, dict[str, Any]] = {
            "verifier_evaluation": {"verifier_status": "SKIPPED", "failure_reason": reason,
                                    "interrupted": {"reason": reason, "ended_by": self.instance_id}},
        }
        if composed.structured_answer is not None:
            channels["answer"] = {"structured_answer": composed.structured_answer.model_dump(),
                                  "retryable": retryable("FALLBACK", INTERRUPTED, None)}
        typed = events.fallback(INTERRUPTED, None, EDGE_INTERRUPTED)
        message = f"fallback info {EDGE_INTERRUPTED}: {reason}"
        event = {"node": "fallback", "phase": "INFO", "status": EDGE_INTERRUPTED, "reason": reason,
                 "payload": {"round": 0, "fallback_type": INTERRUPTED,
                             PROGRESS_KEY: stored_form(typed, node="fallback", phase="INFO", kind="fallback",
                                                       message=message)}}
        return self._runs.interrupt_run(run_id, fallback_type=INTERRUPTED, answer=composed.answer, reason=reason,
                                        channels=channels, event=event, stale_before=stale_before,
                                        gateway_instance=gateway_instance)

    # -- graceful shutdown ---------------------------------------------------------------------

    def drain(self, grace_seconds: float) -> None:
        """Stop taking runs, give those in flight `grace_seconds` to finish, then stop them (they
        end RUN_INTERRUPTED themselves), and end in the store any of this process still RUNNING."""
        self.stopping.set()
        self._wait_for_live(grace_seconds)
        if self.live_runs():
            log.warning("stopping %d run(s) still in flight after %g s", self.live_runs(), grace_seconds)
            self.interrupting.set()
            self._wait_for_live(INTERRUPT_WAIT_SECONDS)
        self.stop()
        try:
            for run in self._runs.running_runs(self.instance_id):
                if self.interrupt(run["run_id"], run["query"], STOPPED_REASON, gateway_instance=self.instance_id):
                    log.warning("ended run %s at shutdown", run["run_id"], extra={"run_id": run["run_id"]})
        except Exception:  # the store is gone too: another replica's reaper ends them later
            log.exception("could not end this gateway's running runs at shutdown")

    def _wait_for_live(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self.live_runs() and time.monotonic() < deadline:
            time.sleep(0.05)
