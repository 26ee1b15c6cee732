"""What happened, read by policies, callbacks and reports.

- :mod:`~tf_hetero.telemetry.records`: the one :class:`TaskRecord` and :class:`RoundRecord`;
- :mod:`~tf_hetero.telemetry.monitor`: :class:`Monitor`, fed by the engine;
- :mod:`~tf_hetero.telemetry.tasklog`: :class:`TaskLog`, closure timing for any PS strategy
  (stock TF too);
- :mod:`~tf_hetero.telemetry.perf`: capacity, ideal throughput, efficiency;
- :mod:`~tf_hetero.telemetry.roundprofile`: a round's (a stock step's) critical path, phase
  by phase (``tf-hetero bench --round-profile``).
"""

from tf_hetero.telemetry.monitor import Monitor
from tf_hetero.telemetry.records import RoundRecord, TaskRecord
from tf_hetero.telemetry.tasklog import TaskLog, WorkerStats, measured_ratios

__all__ = ["Monitor", "TaskRecord", "RoundRecord", "TaskLog", "WorkerStats", "measured_ratios"]
