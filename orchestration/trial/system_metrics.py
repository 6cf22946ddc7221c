"""MLflow's system metrics on a trial's run (issue 44 item 3): CPU, memory, disk and network (GPU where
``nvidia-ml-py`` is installed) as ``system/…`` metrics beside the training curves, which tell why a trial was slow.

MLflow samples them in a thread of the process that owns the run (``mlflow.start_run(log_system_metrics=True)``
starts one); a trial's run is made with :class:`mlflow.MlflowClient`, never the fluent API, so the trial starts
MLflow's :class:`~mlflow.system_metrics.system_metrics_monitor.SystemMetricsMonitor` itself for its run, in its Ray
worker, at the sweep YAML's ``tracking.system_metrics_interval``. A restarted attempt continues the run's steps
(``resume_logging``). MLflow's monitor publishes nothing for a run shorter than one interval (its thread exits on the
stop signal before its first publish) nor what it sampled after its last publish, and a trial Tune stops may lose its
process before it can say anything; so :class:`TrialSystemMetrics` publishes one sample when the attempt starts and
one when it stops, besides the thread's: every trial's run has them, however it ends."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

__all__ = ["TrialSystemMetrics", "SYSTEM_PREFIX"]

SYSTEM_PREFIX = "system/"   # MLflow's prefix of every system metric (system/cpu_utilization_percentage, …)


class TrialSystemMetrics:
    """The system-metrics thread of one trial attempt: :meth:`start` it once the run is RUNNING (a first sample is
    logged then), :meth:`stop` it before the run ends (a last sample is logged then). ``interval`` None: off
    (``tracking.system_metrics: false``), both calls do nothing."""

    def __init__(self, tracking_uri: str, run_id: str, interval: float | None):
        self.tracking_uri, self.run_id, self.interval = tracking_uri, run_id, interval
        self._monitor: SystemMetricsMonitor | None = None

    def start(self) -> "TrialSystemMetrics":
        if self.interval is None:
            return self
        # MLflow says at INFO that it starts, stops and has no GPU to watch: one line per trial on the console
        logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)
        try:
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor
        except ImportError as e:  # psutil missing on this worker: the trial trains, without them, said once
            print(f"[trial] no system metrics on run {self.run_id}: {e} (pip install psutil)", file=sys.stderr,
                  flush=True)
            return self
        self._monitor = SystemMetricsMonitor(self.run_id, sampling_interval=self.interval, resume_logging=True,
                                             tracking_uri=self.tracking_uri)
        self._sample(self._monitor)
        self._monitor.start()
        return self

    def stop(self) -> None:
        """The thread stopped (what it published is logged) and a last sample logged."""
        monitor, self._monitor = self._monitor, None
        if monitor is not None:
            monitor.finish()
            self._sample(monitor)

    def _sample(self, monitor: "SystemMetricsMonitor") -> None:
        """One sample logged now, at the monitor's next step (with what its thread sampled since it last published)."""
        try:
            monitor.collect_metrics()
            monitor.publish_metrics(monitor.aggregate_metrics())
            monitor.mlflow_logger.flush()
        except Exception as e:  # noqa: BLE001 - monitoring never fails a trial
            print(f"[trial] system metrics of run {self.run_id} not logged: {type(e).__name__}: {e}",
                  file=sys.stderr, flush=True)
