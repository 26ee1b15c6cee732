"""TensorFlow's logs: quiet by default, all of them when asked for.

TensorFlow's C++ runtime writes to stderr from the moment it is imported: oneDNN notes, CUDA
probing on a machine without a GPU (``E0000 ... failed call to cuInit``), CPU-instruction
notes, gRPC server starts. A user of a CPU cluster can act on none of them, and they come
before the first line of ours. Quiet (the default) means:

- ``TF_CPP_MIN_LOG_LEVEL=2`` (unless already set) in this process before TensorFlow is
  imported and in every process tf-hetero starts (:func:`child_env`: LocalCluster servers,
  ``tf-hetero run`` programs): TensorFlow's C++ INFO and WARNING lines are dropped, its
  ERROR and FATAL lines still show;
- while ``import tensorflow`` runs after ``import tf_hetero`` (and while TensorFlow probes
  its devices, right after), stderr is captured and replayed without the lines that variable
  cannot stop (written before TensorFlow's logging is initialised) and without CUDA's probe
  errors on a machine without a GPU: :data:`TF_LOG_LINE`, :data:`HARMLESS_ERRORS`. Anything
  else written meanwhile (a Python error, a warning) is replayed as it came;
- Python warnings from TensorFlow and tf_keras internals that the user's code did not cause
  are filtered (:data:`IGNORED_WARNINGS`); ``warnings.simplefilter("default")`` after
  ``import tf_hetero`` brings them back.

``TF_HETERO_TF_LOGS=1`` (``tf-hetero --tf-logs ...``) turns all of this off, in the processes
tf-hetero starts too. An explicit ``TF_CPP_MIN_LOG_LEVEL`` is respected either way.

>>> bool(TF_LOG_LINE.search("I0000 00:00:1795441465.822551   19240 port.cc:153] oneDNN on."))
True
>>> bool(TF_LOG_LINE.search("[tf-hetero] epoch 1/4 done in 4.9s"))
False
>>> child_env({}, logs=False)["TF_CPP_MIN_LOG_LEVEL"], "TF_CPP_MIN_LOG_LEVEL" in child_env({}, logs=True)
('2', False)
"""

from __future__ import annotations

import contextlib
import importlib.abc
import os
import re
import sys
import tempfile
import threading
import warnings

from tf_hetero import env as _env

__all__ = ["TF_LOGS_ENV", "TF_LOG_LINE", "HARMLESS_ERRORS", "IGNORED_WARNINGS", "wanted",
           "quiet", "show", "child_env", "relay"]

#: Set to 1 (or true/yes/on) to see TensorFlow's logs as TensorFlow prints them.
TF_LOGS_ENV = _env.TF_LOGS
#: The C++ level kept when quiet: 2 drops INFO and WARNING, keeps ERROR and FATAL.
QUIET_LEVEL = "2"

#: A line of TensorFlow's C++ logging (absl format ``I0000 00:00:... file.cc:12] ...``, the
#: older ``YYYY-MM-DD hh:mm:ss.mmm: I file.cc:12] ...``, or absl's note about its start).
TF_LOG_LINE = re.compile(
    r"^(?:[IWEF]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [\w./+-]+:\d+\] "
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] [\w./+-]+:\d+\] "
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called)")
#: ERROR lines of TensorFlow's CUDA probing on a machine without a (usable) GPU: dropped
#: while TensorFlow is imported and probes its devices. Every other ERROR line shows.
HARMLESS_ERRORS = re.compile(r"cuInit|Unable to register cu(?:DNN|FFT|BLAS) factory|"
                             r"cuda_diagnostics|cuda_driver\.cc|cuda_executor\.cc")
#: The second line of TensorFlow's CPU-instruction note.
_CONTINUATION = re.compile(r"^To enable the following instructions: .* rebuild TensorFlow")

#: (message regex, category, module regex) of the Python warnings filtered when quiet:
#: deprecations inside TensorFlow/tf_keras (the user's own calls are not affected: the
#: module is where the warning is raised from) and NumPy's notes on TF's dtype aliases.
IGNORED_WARNINGS = (
    ("", DeprecationWarning, r"(tensorflow|tf_keras|keras|absl|flatbuffers|google\.protobuf)"),
    ("", PendingDeprecationWarning, r"(tensorflow|tf_keras|keras)"),
    ("", FutureWarning, r"(tensorflow|tf_keras|keras)"),
)


def wanted(env=None) -> bool:
    """True if the user asked for TensorFlow's logs (``TF_HETERO_TF_LOGS``)."""
    return _env.tf_logs_wanted(env)


def child_env(env: dict, logs: bool | None = None) -> dict:
    """``env`` for a process tf-hetero starts: quiet TensorFlow unless logs are wanted
    (``logs``; default: ``TF_HETERO_TF_LOGS`` in ``env``)."""
    if not (wanted(env) if logs is None else logs):
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", QUIET_LEVEL)
    return env


def _noise(line: str) -> bool:
    if _CONTINUATION.search(line):
        return True
    if not TF_LOG_LINE.search(line):
        return False
    return not line.startswith(("E", "F")) or bool(HARMLESS_ERRORS.search(line))


@contextlib.contextmanager
def _stderr_filtered():
    """Captures file descriptor 2 (C++ and Python writes alike) into a temporary file and
    replays it without :func:`_noise` lines when the block ends (also on an exception)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            finally:
                os.dup2(saved, 2)
                os.close(saved)
            captured.seek(0)
            text = captured.read().decode(errors="replace")
            kept = "".join(line for line in text.splitlines(keepends=True) if not _noise(line))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()


class _QuietLoader(importlib.abc.Loader):
    """TensorFlow's own loader, run inside :func:`_stderr_filtered`."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        with _stderr_filtered():
            self._loader.exec_module(module)
            try:  # the CUDA probe's errors come with the first device query: make it here
                module.config.list_physical_devices()
            except Exception:  # pylint: disable=broad-except
                pass

    def __getattr__(self, name):  # get_source, get_filename, is_package, ...
        return getattr(self._loader, name)


class _QuietImport(importlib.abc.MetaPathFinder):
    """Wraps the next ``import tensorflow`` in :func:`_stderr_filtered`; then steps aside."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _QuietLoader(spec.loader)
                return spec
        return None


#: What :func:`quiet` changed, so that :func:`show` can undo exactly that.
_applied: dict = {}


def quiet() -> None:
    """Makes this process quiet as described above, unless TensorFlow's logs are wanted.
    Run by ``import tf_hetero``; harmless to repeat."""
    if wanted() or _applied:
        return
    if _env.tf_cpp_min_log_level() is None:
        _env.set_var(_env.TF_CPP_MIN_LOG_LEVEL, QUIET_LEVEL)
        _applied["level"] = QUIET_LEVEL
    for message, category, module in IGNORED_WARNINGS:
        warnings.filterwarnings("ignore", message, category, module)
    _applied["filters"] = warnings.filters[:len(IGNORED_WARNINGS)]
    if "tensorflow" not in sys.modules:
        _applied["finder"] = _QuietImport()
        sys.meta_path.insert(0, _applied["finder"])
    _applied["done"] = True


def show() -> None:
    """TensorFlow's logs as TensorFlow prints them, here and in the processes tf-hetero starts
    from now on (``--tf-logs``): sets ``TF_HETERO_TF_LOGS=1`` and undoes :func:`quiet`."""
    _env.set_var(TF_LOGS_ENV, "1")
    if _env.tf_cpp_min_log_level() == _applied.pop("level", None):
        _env.unset_var(_env.TF_CPP_MIN_LOG_LEVEL)
    for entry in _applied.pop("filters", ()):
        with contextlib.suppress(ValueError):
            warnings.filters.remove(entry)
    with contextlib.suppress(ValueError):
        sys.meta_path.remove(_applied.pop("finder", None))
    _applied.clear()


def relay(stream, out) -> threading.Thread:
    """Copies the lines of ``stream`` (a child's stderr pipe, bytes) to ``out`` without
    TensorFlow's INFO/WARNING lines and CUDA probe errors, until ``stream`` ends; the thread
    that does it (join it after the child exits)."""
    def pump():
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace")
            if not _noise(line):
                out.write(line)
                out.flush()
        stream.close()

    thread = threading.Thread(target=pump, daemon=True, name="tf-hetero-stderr-relay")
    thread.start()
    return thread
