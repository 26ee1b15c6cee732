"""The TensorFlow mechanism under the strategies: coordinator, dispatcher, step tracing,
worker hooks, watchdog, PS accumulators, local buffers and push codecs. Every private
TensorFlow/tf_keras internal tf-hetero relies on is reached from this folder (listed in
docs/TF_INTERNALS.md), so a TF upgrade is a one-folder audit."""
