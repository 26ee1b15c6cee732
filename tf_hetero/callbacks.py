"""Progress output for ``model.fit`` under parameter-server strategies.

tf_keras refuses ``verbose=1`` (the progress bar) under a PS strategy: batch-level callbacks
would block the coordinator on remote values. :class:`Progress` instead counts tasks as the
coordinator's worker threads finish them (a :class:`~tf_hetero.telemetry.TaskLog`) and prints a
line from a background thread every ``interval_s`` seconds, plus one line per epoch with the
epoch's logs::

    model.fit(train, epochs=3, steps_per_epoch=100, verbose=0,
              callbacks=[tf_hetero.Progress()])

    [tf-hetero] epoch 1/3  tasks 57/300  19%  28.3 tasks/s  per worker 19/18/15/5  eta 8s
    [tf-hetero] epoch 1/3 done in 3.6s  loss 1.2031

It also works without a PS strategy (then it prints only the epoch lines).
"""

from __future__ import annotations

import sys
import threading
import time

import tf_keras as keras

from tf_hetero import tfcompat
from tf_hetero.telemetry.tasklog import TaskLog

__all__ = ["Progress", "MonitorLogs"]


class Progress(keras.callbacks.Callback):
    """Prints task progress while ``fit`` runs, and each epoch's logs when it ends.

    Args:
      interval_s: seconds between progress lines (> 0).
      task_log: a log already attached to the coordinator (one is made if omitted).
      stream: where to print (``sys.stdout`` by default).
    """

    def __init__(self, interval_s: float = 2.0, task_log: TaskLog | None = None, stream=None):
        super().__init__()
        if not interval_s > 0:
            raise ValueError(f"Progress(interval_s={interval_s!r}): need seconds > 0.")
        self.interval_s = float(interval_s)
        self.task_log = task_log
        self.stream = stream or sys.stdout
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._epoch = 0
        self._epoch_t0 = 0.0

    def _print(self, text: str) -> None:
        print(f"[tf-hetero] {text}", file=self.stream, flush=True)

    def on_train_begin(self, logs=None):
        strategy = self.model.distribute_strategy
        self._epochs = self.params.get("epochs") or 0
        self._steps = self.params.get("steps") or 0
        self._total = self._epochs * self._steps
        if tfcompat.strategy.uses_coordinator(strategy):
            self._num_workers = tfcompat.strategy.num_workers(strategy)
            if self.task_log is None:
                self.task_log = TaskLog.for_strategy(strategy)
            self._engine = getattr(strategy, "engine", None)
            self._start_count = len(self.task_log) + self._absorbed()
            self._t0 = time.perf_counter()
            self._stop.clear()
            self._fit = tfcompat.keras.calling_fit()
            self._thread = threading.Thread(target=self._loop, name="tf-hetero-progress",
                                            daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        # A fit that raises calls no on_train_end: the thread also ends once the fit that
        # started it is no longer running.
        while not self._stop.wait(self.interval_s) and tfcompat.keras.fit_running(self._fit):
            self._print(self.line())

    def line(self) -> str:
        """The current progress line."""
        done = len(self.task_log) + self._absorbed() - self._start_count
        elapsed = time.perf_counter() - self._t0
        rate = done / elapsed if elapsed > 0 else 0.0
        per = "/".join(str(c) for c in self.task_log.counts(self._num_workers))
        text = f"epoch {self._epoch + 1}/{self._epochs}  tasks {done}/{self._total}"
        if self._total:
            text += f"  {100.0 * done / self._total:3.0f}%"
        text += f"  {rate:.1f} tasks/s  per worker {per}"
        if rate > 0 and self._total > done:
            text += f"  eta {(self._total - done) / rate:.0f}s"
        return text

    def _absorbed(self) -> int:
        """Steps a sized round covered without running (``Round.absorbed``): done too."""
        return getattr(self._engine, "absorbed_steps", 0)

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._epoch_t0 = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        metrics = "  ".join(f"{k} {float(v):.4f}" for k, v in (logs or {}).items()
                            if _is_number(v) and not k.startswith("tf_hetero/"))
        self._print(f"epoch {epoch + 1}/{self._epochs} done in "
                    f"{time.perf_counter() - self._epoch_t0:.1f}s  {metrics}".rstrip())

    def on_train_end(self, logs=None):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 1.0)
            self._thread = None


def _is_number(v) -> bool:
    try:
        float(v)
        return True
    except (TypeError, ValueError):
        return False


class MonitorLogs(keras.callbacks.Callback):
    """Adds the epoch's monitor summary to the epoch logs as ``tf_hetero/<name>``.

    Put it *before* ``TensorBoard`` (and ``CSVLogger``) in ``callbacks`` so they record it::

        model.fit(..., callbacks=[tf_hetero.MonitorLogs(strategy), keras.callbacks.TensorBoard(d)])
    """

    def __init__(self, strategy_or_monitor):
        super().__init__()
        self.monitor = getattr(strategy_or_monitor, "monitor", strategy_or_monitor)
        self._since = None
        self._ps_before = None

    def on_epoch_begin(self, epoch, logs=None):
        self._since = self.monitor.clock()
        # Emulated PS tasks (profile ps_mbps): their counters, one read per PS per epoch.
        totals = getattr(self.monitor, "ps_totals", None)
        self._ps_before = totals() if totals is not None else None

    def on_epoch_end(self, epoch, logs=None):
        if logs is None:
            return
        for key, value in self.monitor.summary(since=self._since).items():
            logs[f"tf_hetero/{key}"] = value
        if self._ps_before is not None:
            from tf_hetero.telemetry.psload import served_figures

            for key, value in served_figures(self._ps_before, self.monitor.ps_totals()).items():
                logs[f"tf_hetero/{key}"] = value
